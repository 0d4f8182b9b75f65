"""What the simulated users ask for: the shapes of decided problems in the seeded database."""

from __future__ import annotations

import random
from typing import Any

from sqlalchemy import select

from db.engine import Database
from db.models import DecisionRow, ProblemRow


def pick(url: str, n: int, gpu: str, seed: int = 0) -> dict[str, Any]:
    """``n`` ``/v1/best`` queries of decided problems (half naming their GPU model), and the
    GEMM problems decided on ``gpu`` that the users submit jobs for."""
    db = Database(url)
    try:
        with db.read_session() as s:
            rows = s.execute(select(ProblemRow.spec, DecisionRow.gpu_model)
                             .join(DecisionRow, DecisionRow.problem_id == ProblemRow.id)
                             .where(DecisionRow.superseded_at.is_(None))).all()
    finally:
        db.dispose()
    if not rows:
        raise ValueError(f"{url} holds no decided problem: seed it first")
    rng = random.Random(seed)
    chosen = rng.sample(rows, min(n, len(rows)))
    best = [query(spec) | ({"gpu": model} if i % 2 else {})
            for i, (spec, model) in enumerate(chosen)]
    jobs = [dict(spec) for spec, model in rows if model == gpu and spec.get("kind") == "gemm"]
    if not jobs:
        raise ValueError(f"no GEMM problem is decided on {gpu!r}")
    return {"best": best, "jobs": rng.sample(jobs, min(n, len(jobs))), "gpu": gpu}


def query(spec: dict[str, Any]) -> dict[str, str]:
    """A problem's fields as ``/v1/best`` query parameters."""
    return {k: (("true" if v else "false") if isinstance(v, bool) else str(v))
            for k, v in spec.items() if v is not None}
