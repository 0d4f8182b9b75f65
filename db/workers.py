"""Repository of workers (one row per registered worker name)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.models import WorkerRow
from db.records import WorkerRecord


def by_name(session: Session, name: str) -> WorkerRecord | None:
    row = session.scalars(select(WorkerRow).where(WorkerRow.name == name)).first()
    return WorkerRecord.of(row) if row is not None else None


def register(session: Session, name: str, gpu_model: str, device: dict[str, Any],
             now: datetime, secret_sha256: str | None = None,
             token_name: str | None = None) -> WorkerRecord:
    """Create the worker ``name`` or refresh its device fingerprint (a restarted worker);
    ``secret_sha256`` and ``token_name`` are kept only where the worker has none yet (the
    caller checks the record's: a concurrent first registration may have set others)."""
    row = session.scalars(select(WorkerRow).where(WorkerRow.name == name)).first()
    if row is None:
        try:
            with session.begin_nested():
                row = WorkerRow(name=name, gpu_model=gpu_model, device=device,
                                registered_at=now, last_seen=now, secret_sha256=secret_sha256,
                                token_name=token_name)
                session.add(row)
        except IntegrityError:
            row = session.scalars(select(WorkerRow).where(WorkerRow.name == name)).one()
    if row.secret_sha256 is None:
        row.secret_sha256 = secret_sha256
    if row.token_name is None:
        row.token_name = token_name
    row.gpu_model = gpu_model
    row.device = device
    row.last_seen = now
    session.flush()
    return WorkerRecord.of(row)


def get_worker(session: Session, worker_id: int) -> WorkerRecord | None:
    row = session.get(WorkerRow, worker_id)
    return WorkerRecord.of(row) if row is not None else None


def latest_of_model(session: Session, gpu_model: str | None) -> WorkerRecord | None:
    """The most recently seen worker of a GPU model (its device stands for the model); of any
    model when ``gpu_model`` is None."""
    if gpu_model is None:
        row = session.scalars(_LATEST_OF_ANY).first()
    else:
        row = session.scalars(_LATEST_OF_MODEL, {"gpu_model": gpu_model}).first()
    return WorkerRecord.of(row) if row is not None else None


#: :func:`latest_of_model`'s statements, built once.
_LATEST_OF_ANY = select(WorkerRow).order_by(WorkerRow.last_seen.desc()).limit(1)
_LATEST_OF_MODEL = (select(WorkerRow).where(WorkerRow.gpu_model == bindparam("gpu_model"))
                    .order_by(WorkerRow.last_seen.desc()).limit(1))


def touch(session: Session, worker_id: int, now: datetime) -> None:
    session.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(last_seen=now))
