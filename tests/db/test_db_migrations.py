"""Alembic migrations on SQLite and Postgres, next to Optuna's own tables."""

from __future__ import annotations

import optuna
from alembic import command
from sqlalchemy import inspect

from db.engine import make_engine
from db.migrate import VERSION_TABLE, alembic_config, current, upgrade

OURS = {"workers", "problems", "jobs", "candidates", "measurements", "leases", "calibrations",
        "decisions", "worker_catalogues", "tuning_summaries"}


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_head_twice_is_a_noop(database_url: str) -> None:
    assert current(database_url) is None
    upgrade(database_url)
    assert current(database_url) == "0012"
    tables = _tables(database_url)
    assert OURS | {VERSION_TABLE} <= tables and "alembic_version" not in tables
    upgrade(database_url)
    assert current(database_url) == "0012" and _tables(database_url) == tables
    command.check(alembic_config(database_url))  # the models match the migrations


def test_coexists_with_optuna_storage(database_url: str) -> None:
    # Optuna first, then ours: its alembic_version is left alone and ours is separate.
    storage = optuna.storages.RDBStorage(database_url)
    try:
        upgrade(database_url)
        optuna.create_study(storage=storage, study_name="s").optimize(lambda t: 1.0,
                                                                       n_trials=1)
        upgrade(database_url)
        tables = _tables(database_url)
        assert {"alembic_version", "studies", "trials", VERSION_TABLE} | OURS <= tables
        assert current(database_url) == "0012"
        assert len(optuna.load_study(study_name="s", storage=storage).trials) == 1
    finally:
        storage.engine.dispose()


def test_downgrade_to_base(database_url: str) -> None:
    upgrade(database_url)
    command.downgrade(alembic_config(database_url), "base")
    assert not OURS & _tables(database_url)


def test_candidates_of_trials_are_read_by_an_index(database_url: str) -> None:
    # the planner reads a study's candidates by problem, tier and trial number
    # (db.candidates.of_trials) each time it tells a study: without this index that read
    # scans every candidate ever stored
    upgrade(database_url)
    engine = make_engine(database_url)
    try:
        indexes = {i["name"]: i["column_names"]
                   for i in inspect(engine).get_indexes("candidates")}
    finally:
        engine.dispose()
    assert indexes.get("ix_candidates_problem_trial") == ["problem_id", "tier", "trial_number"]
