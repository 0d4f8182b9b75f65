"""The database unreachable for a while: the API answers 503 with ``Retry-After`` and a message
saying so (never a 500), the workers keep what they measure and retry, and once the database is
back the job completes with nothing lost or stored twice.

Postgres: the API reaches it through a TCP proxy the test cuts (connections reset, new ones
refused). SQLite: another process holds the write lock past the API's busy timeout (the URL's
``?timeout=1``), as a long backup or a stuck writer would; reads go on meanwhile (WAL).
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.deploy.cluster import (
    FORCE,
    PROBLEM,
    Cluster,
    assert_each_measured_once,
    assert_studies_match,
    state,
    wait_until,
)
from tests.faults.proxy import TcpProxy

pytestmark = [pytest.mark.faults, pytest.mark.slow]

#: uvicorn's access line for a worker's call answered 503
_WORKER_503 = re.compile(r'"POST /v1/workers/\d+/(lease|report|leases/\S+/renew) HTTP/1.1" 503')


def _workers_met_it(api_log: str) -> bool:
    """Whether a worker's call met the outage: a 503 to a worker call besides the test's own
    lease probe."""
    return len(_WORKER_503.findall(api_log)) >= 2


def test_the_database_away_for_a_while(database_url: str, tmp_path: Path) -> None:
    postgres = database_url.startswith("postgresql")
    proxy: TcpProxy | None = None
    if postgres:
        url = make_url(database_url)
        proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432)).__enter__()
        api_url = url.set(host="127.0.0.1", port=proxy.port).render_as_string(
            hide_password=False)
    else:
        api_url = f"{database_url}?timeout=1"

    @contextmanager
    def away() -> Iterator[None]:
        if proxy is not None:
            proxy.cut()
            try:
                yield
            finally:
                proxy.restore()
            return
        lock = sqlite3.connect(make_url(database_url).database or "", isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            lock.execute("COMMIT")
            lock.close()

    try:
        with Cluster(tmp_path, api_url, lease_seconds=20, check_url=database_url) as cl:
            cl.migrate()
            api = cl.api("api")
            workers = [cl.worker("w1", api), cl.worker("w2", api)]
            job = cl.client(api).submit_job(PROBLEM, budget={"max_trials": 10},
                                            policy={**FORCE, "full_search": True})

            def measured() -> int:
                return sum(1 for c in state(cl.db, job["id"]).trials if c.status == "done")

            wait_until(lambda: measured() >= 2, 180, "two trials measured", cl._dump)
            worker_id = state(cl.db, job["id"]).candidates[0].worker_id
            secret = {"X-Worker-Secret": cl.worker_secret(worker_id, api)}
            with away():
                submit = httpx.post(f"{api.url}/v1/jobs", json={"problem": PROBLEM},
                                    timeout=30)
                lease = httpx.post(f"{api.url}/v1/workers/{worker_id}/lease",
                                   json={"max_candidates": 1}, timeout=30, headers=secret)
                ready = httpx.get(f"{api.url}/readyz", timeout=30)
                reads = httpx.get(f"{api.url}/v1/jobs/{job['id']}", timeout=30)
                # away until the workers ran into it, and for a few seconds at least
                time.sleep(3.0)
                wait_until(lambda: _workers_met_it(api.proc.log()), 60,
                           "a worker's call to meet the outage", cl._dump)
                during = measured()
            final = cl.wait_job(api, job["id"])
            st = state(cl.db, job["id"])
            assert_studies_match(cl.db, [st])
            api_log = api.proc.log()
            logs = [w.log() for w in workers]
            alive = all(w.alive for w in workers)
    finally:
        if proxy is not None:
            proxy.cut()

    for answer in (submit, lease):
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"] == "1"
        assert "the database is unavailable" in answer.json()["detail"]
    if postgres:
        assert ready.status_code == 503 and reads.status_code == 503
    else:  # SQLite in WAL mode: readers go on while a writer holds the lock
        assert ready.status_code == 200 and reads.status_code == 200
    assert not re.search(r'" 500 ', api_log), "a 500 while the database was away"
    assert _workers_met_it(api_log)
    assert alive
    assert final["status"] == "done" and final["progress"]["trials_done"] == 10, final
    assert final["progress"]["trials_done"] > during
    assert_each_measured_once(st)
    kept = {int(c) for text in logs
            for c in re.findall(r"report of candidate (\d+) failed, kept for retry", text)}
    for cid in kept:  # measured while the database was away, delivered once it was back
        assert len(st.measurements_of(cid)) == 1, cid
