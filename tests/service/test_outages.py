"""The database unavailable: 503 with Retry-After and a clear message, never a 500.

A real outage here is SQLite's write lock held by another connection past the API's busy
timeout (``?timeout=``); the Postgres connection cut is in ``tests/faults``. The mapping itself
is checked on the errors SQLAlchemy and Optuna raise.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fastapi.testclient import TestClient
from optuna.exceptions import StorageInternalError
from sqlalchemy.exc import IntegrityError, OperationalError

from service.app import create_app
from service.outages import outage_of
from service.settings import ServiceSettings

PROBLEM = {"kind": "gemm", "m": 64, "n": 64, "k": 64, "dtype": "fp16"}


def test_writes_answer_503_while_sqlite_is_locked_and_reads_go_on(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    settings = ServiceSettings(database_url=f"sqlite:///{path}?timeout=0.3", retry_after_s=2)
    with TestClient(create_app(settings)) as http:
        job = http.post("/v1/jobs", json={"problem": PROBLEM}).json()
        lock = sqlite3.connect(path, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")  # a long writer elsewhere (a backup, a stuck process)
        try:
            refused = http.post("/v1/jobs", json={"problem": PROBLEM})
            read = http.get(f"/v1/jobs/{job['id']}")
            ready = http.get("/readyz")
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        after = http.post("/v1/jobs", json={"problem": PROBLEM})
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "2"
    assert refused.json() == {"detail": "the database is unavailable: retry in 2 s (a retried "
                                        "report is never stored twice)"}
    assert read.status_code == 200 and ready.json() == {"status": "ok", "database": "ok"}
    assert after.status_code == 201 and after.json()["id"] == job["id"] + 1


def test_what_counts_as_an_outage() -> None:
    lost = OperationalError("SELECT 1", {}, Exception("server closed the connection"))
    assert outage_of(lost) is lost
    try:  # Optuna wraps what SQLAlchemy raised; the outage stays in the chain
        raise StorageInternalError("commit failed") from lost
    except StorageInternalError as wrapped:
        assert outage_of(wrapped) is lost
    clash = IntegrityError("INSERT", {}, Exception("duplicate key"))
    try:
        raise StorageInternalError("commit failed") from clash
    except StorageInternalError as wrapped:
        assert outage_of(wrapped) is None  # a bug, not an outage: stays a 500
    assert outage_of(ValueError("no")) is None


def test_a_storage_error_that_is_no_outage_is_a_500_with_no_details(tmp_path: Path) -> None:
    app = create_app(ServiceSettings(database_url=f"sqlite:///{tmp_path / 'x.db'}"))

    @app.get("/boom")
    def boom() -> None:
        raise StorageInternalError("commit failed") from IntegrityError(
            "INSERT INTO trials VALUES (secret)", {}, Exception("duplicate key"))

    with TestClient(app) as http:
        r = http.get("/boom")
    assert r.status_code == 500 and r.json() == {"detail": "internal server error"}
