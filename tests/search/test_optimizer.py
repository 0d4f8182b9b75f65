"""The Optuna tuner against a real SQLite storage, with a synthetic objective.

The objective here is a made-up cost model (a fake), used only to drive the ask/tell loop; the
search on recorded GPU measurements is tested in test_replay.py.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_constraints import violations
from search.kinds.gemm.triton_tuner import GemmTuner, study_name
from search.limits import DeviceLimits
from search.optimizer import Choice, SpaceTuner, close_storages
from search.types import Measurement, Status, config_key

H100 = DeviceLimits()


def fake_time_us(config: dict) -> float:
    return 50.0 + 4096.0 / (config["BLOCK_M"] * config["BLOCK_N"]) ** 0.5 + config["SPLIT_K"]


def drive(url: str, problem: GemmProblem, rounds: int, store: dict[str, Measurement],
          batch: int = 8) -> list[dict]:
    proposed = []
    for _ in range(rounds):
        tuner = GemmTuner(url, problem, "fake-gpu", H100)
        for p in tuner.propose(batch, lambda c: store.get(config_key(c))):
            proposed.append(p.config)
            m = Measurement(Status.OK, median_us=fake_time_us(p.config))
            store[config_key(p.config)] = m
            tuner.record(p.trial_number, m)
    return proposed


def test_proposals_are_feasible_new_and_seeded_first(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    problem = GemmProblem(4096, 4096, 4096)
    store: dict[str, Measurement] = {}
    tuner = GemmTuner(url, problem, "fake-gpu", H100)
    first = tuner.propose(3, lambda c: None)
    assert first[0].config["BLOCK_M"] == 128 and first[0].config["BLOCK_N"] == 256  # a seed
    for p in first:
        tuner.record(p.trial_number, Measurement(Status.OK, median_us=fake_time_us(p.config)))
        store[config_key(p.config)] = Measurement(Status.OK, median_us=1.0)
    proposed = drive(url, problem, rounds=3, store=store)
    keys = [config_key(c) for c in proposed]
    assert len(keys) == len(set(keys)) == 24
    assert not set(keys) & {config_key(p.config) for p in first}
    assert all(violations(problem, c, H100) == [] for c in proposed)


def test_study_survives_a_new_process_and_never_repeats_measured_configs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    problem = GemmProblem(1000, 3000, 2000)
    store: dict[str, Measurement] = {}
    first = drive(url, problem, rounds=2, store=store)
    # A new tuner (as after a restart) reads the same study from the database.
    close_storages()
    tuner = GemmTuner(url, problem, "fake-gpu", H100)
    assert tuner.study.study_name == study_name(problem, "fake-gpu")
    assert len([t for t in tuner.study.trials if t.state.name == "COMPLETE"]) >= len(first)
    again = tuner.propose(8, lambda c: store.get(config_key(c)))
    assert not {config_key(p.config) for p in again} & set(store)


def test_failed_configs_are_told_as_infeasible_and_best_ignores_them(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    problem = GemmProblem(512, 512, 512)
    tuner = GemmTuner(url, problem, "fake-gpu", H100)
    a, b = tuner.propose(2, lambda c: None)
    tuner.record(a.trial_number, Measurement(Status.WRONG_RESULT, rel_error=1.0))
    tuner.record(b.trial_number, Measurement(Status.OK, median_us=42.0))
    tuner.record(b.trial_number, Measurement(Status.OK, median_us=1.0))  # idempotent
    assert tuner.best() == (b.config, 42.0)


def test_a_small_space_is_exhausted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    problem = GemmProblem(16, 32, 64)  # few legal tiles
    store: dict[str, Measurement] = {}
    tuner = GemmTuner(url, problem, "fake-gpu", H100)
    seen = 0
    for _ in range(40):
        got = tuner.propose(16, lambda c: store.get(config_key(c)))
        for p in got:
            store[config_key(p.config)] = Measurement(Status.OK, median_us=1.0)
            tuner.record(p.trial_number, store[config_key(p.config)])
        seen += len(got)
        if tuner.exhausted:
            break
    assert tuner.exhausted
    assert seen == len(store) > 0


def test_a_changed_space_gets_its_own_study_and_keeps_the_old(tmp_path: Path) -> None:
    """A release that changes a parameter's choices (Optuna refuses to ask those in the old
    study) tunes in a study of its own, found again by every later tuner of that space."""
    url = f"sqlite:///{tmp_path / 'o.db'}"

    def tuner(values: tuple[int, ...]) -> SpaceTuner:
        return SpaceTuner(url, "toy|problem|gpu", (Choice("X", values),),
                          seeds=[{"X": values[0]}])

    old = tuner((1, 2))
    for p in old.propose(2, lambda c: None):
        old.record(p.trial_number, Measurement(Status.OK, median_us=float(p.config["X"])))
    wider = tuner((1, 2, 3))
    assert wider.study.study_name.startswith("toy|problem|gpu|space-")
    assert wider.fresh and [p.config for p in wider.propose(1, lambda c: None)] == [{"X": 1}]
    close_storages()
    assert tuner((1, 2, 3)).study.study_name == wider.study.study_name
    # the old space still finds its study, with its trials
    again = tuner((1, 2))
    assert again.study.study_name == "toy|problem|gpu"
    assert again.best() == ({"X": 1}, 1.0)
    # a parameter the old trials lack is no conflict: the same study goes on
    grown = SpaceTuner(url, "toy|problem|gpu", (Choice("X", (1, 2)), Choice("Y", (0, 1))))
    assert grown.study.study_name == "toy|problem|gpu"


def test_an_existing_study_is_opened_without_trying_to_create_it(database_url: str) -> None:
    """A tuner of a study that exists reads it: no insert that the database refuses (and
    Postgres logs as an error) each time a tuner is made."""
    import sqlalchemy

    from search.optimizer import open_study, storage_for

    storage = storage_for(database_url)
    inserts: list[str] = []

    def seen(_conn, _cursor, statement, *_args) -> None:  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("INSERT INTO STUDIES"):
            inserts.append(statement)

    sqlalchemy.event.listen(storage.engine, "before_cursor_execute", seen)
    try:
        first = open_study(storage, "opened")
        assert len(inserts) == 1  # created
        again = open_study(storage, "opened")
        assert inserts[1:] == [] and again._study_id == first._study_id
        assert again.direction == first.direction == optuna.study.StudyDirection.MINIMIZE
    finally:
        sqlalchemy.event.remove(storage.engine, "before_cursor_execute", seen)
        close_storages()
