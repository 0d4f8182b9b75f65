"""The SYNTHETIC dashboard database (``scripts.dashboard.seed``): labelled synthetic, decided
by the service's own decision loop, and consistent with what the service answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from db.engine import Database
from db.models import CandidateRow, DecisionRow, MeasurementRow, SummaryRow
from scripts.dashboard.seed import seed_database
from service.app import create_app
from service.settings import ServiceSettings


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('seed')) / 'seed.db'}"
    written = seed_database(url, problems=30, measurements=3000, attention_share=0.3,
                            active=2, seed=11)
    assert written["problems"] == 30 and written["measurements"] >= 3000
    return url


def test_every_row_says_it_is_synthetic(seeded: str) -> None:
    db = Database(seeded)
    try:
        with db.read_session() as s:
            envs = s.scalars(select(MeasurementRow.env)).all()
            gpus = set(s.scalars(select(MeasurementRow.gpu_model)).all())
    finally:
        db.dispose()
    assert envs and all(e.get("synthetic") is True and e.get("replays") for e in envs)
    assert gpus and all(g.endswith("(synthetic)") for g in gpus)


def test_decisions_point_at_their_own_measured_picks(seeded: str) -> None:
    db = Database(seeded)
    try:
        with db.read_session() as s:
            decisions = s.scalars(select(DecisionRow)).all()
            verdicts = {d.verdict for d in decisions}
            for d in decisions:
                pick = d.evidence[d.chosen]["candidate_id"]
                cand = s.get(CandidateRow, pick)
                assert cand is not None and cand.job_id == d.job_id
                assert cand.backend == d.backend and cand.status == "done"
            totals = {(r.problem_id, r.gpu_model): r.trials for r in s.scalars(
                select(SummaryRow))}
            counted = dict(((p, g), n) for p, g, n in s.execute(
                select(MeasurementRow.problem_id, MeasurementRow.gpu_model, func.count())
                .where(MeasurementRow.task.is_(None))
                .group_by(MeasurementRow.problem_id, MeasurementRow.gpu_model)).all())
    finally:
        db.dispose()
    assert len(decisions) > 30 and verdicts >= {
        "custom_wins", "library_wins_after_search"}
    assert totals == counted


def test_the_service_serves_the_seeded_decisions(seeded: str) -> None:
    app = create_app(ServiceSettings(database_url=seeded))
    try:
        with TestClient(app) as http:
            row = http.get("/ui/api/overview?verdict=custom_wins").json()["rows"][0]
            problem = http.get("/v1/problems?limit=500").json()["items"]
            spec = next(p["problem"] for p in problem if p["id"] == row["problem_id"])
            best = http.get("/v1/best", params={**spec, "gpu": row["gpu_model"]})
            assert best.status_code == 200, best.text
            assert best.json()["backend"] == row["backend"]
            assert best.json()["decision"]["verdict"] == "custom_wins"
    finally:
        app.state.flow.close()


def test_an_existing_database_is_refused(seeded: str) -> None:
    with pytest.raises(ValueError, match="already holds 30 problems"):
        seed_database(seeded, problems=1, measurements=1)
