"""Repository of worker catalogues: per GPU model and kind, what its workers can build.

The kind is the key the workers declare it under, ``"<problem kind>/<backend>"``
(``"gemm/cutlass"``: the CUTLASS operation catalogue); the body is stored as declared.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import CatalogueRow
from db.records import CatalogueRecord


def digest_of(body: dict[str, Any]) -> str:
    """The digest of a catalogue body: its canonical JSON's SHA-256, 16 hex digits (for the
    CUTLASS catalogue, ``Catalogue.digest`` of the body it encodes)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def declare(session: Session, gpu_model: str, kind: str, digest: str, body: dict[str, Any],
            worker_id: int | None, now: datetime) -> None:
    """Store what a worker declared; the latest declaration for the GPU model replaces the
    previous one (the body is rewritten only when its digest changes)."""
    row = session.get(CatalogueRow, (gpu_model, kind), with_for_update=True)
    if row is None:
        session.add(CatalogueRow(gpu_model=gpu_model, kind=kind, digest=digest, body=body,
                                 worker_id=worker_id, updated_at=now))
    elif row.digest != digest:
        row.digest, row.body, row.worker_id, row.updated_at = digest, body, worker_id, now
    session.flush()


def digest(session: Session, gpu_model: str, kind: str) -> str | None:
    """The digest of the stored catalogue (cheap: the body stays in the database)."""
    return session.scalars(select(CatalogueRow.digest).where(
        CatalogueRow.gpu_model == gpu_model, CatalogueRow.kind == kind)).first()


def get(session: Session, gpu_model: str, kind: str) -> CatalogueRecord | None:
    row = session.get(CatalogueRow, (gpu_model, kind))
    return CatalogueRecord.of(row) if row is not None else None
