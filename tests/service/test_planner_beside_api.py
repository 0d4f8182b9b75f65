"""The planner beside the API on one host: ``kernelsearch planner --idle`` runs in the kernel's
idle scheduling class (``SCHED_IDLE``) and ``--async-commit`` commits on Postgres without
waiting for the disk, and ``kernelsearch serve`` starts its planner with both unless told
``--no-planner-idle`` or ``--no-planner-async-commit``: a request waking up never waits for a
core, nor for a flush of the disk, behind the planner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from service.cli import app
from service.settings import get_settings

ROOT = Path(__file__).resolve().parents[2]

#: runs ``planner --drain`` with the given options in a process of its own (the scheduling
#: class and the engines' events are the process's: never the test runner's) and prints what
#: planning ran under: the scheduling class, the nice value added, and the
#: ``synchronous_commit`` of the planner's own connections and of Optuna's (Postgres only)
_PLANNER = """
import json, os, sys
from sqlalchemy import text
from typer.testing import CliRunner
from search.optimizer import storage_for
from service.cli import app
from service.planner import Planner
before, seen = os.nice(0), {}
def drain(self, max_steps=1000):
    seen.update(idle=os.sched_getscheduler(0) == os.SCHED_IDLE, nice=os.nice(0) - before)
    if self.flow.db.dialect == "postgresql":
        with self.flow.db.session() as s:
            seen["ours"] = s.scalar(text("SHOW synchronous_commit"))
        with storage_for(self.flow.db.url).engine.connect() as c:
            seen["optuna"] = c.scalar(text("SHOW synchronous_commit"))
    return 0
Planner.drain = drain
r = CliRunner().invoke(app, ["planner", "--drain", *sys.argv[1:]])
assert r.exit_code == 0, r.output
print(json.dumps(seen))
"""


def _planner(url: str, *args: str) -> dict[str, Any]:
    env = dict(os.environ, KS_DATABASE_URL=url, KS_PLANNING="background")
    done = subprocess.run([sys.executable, "-c", _PLANNER, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="no idle scheduling class here")
def test_the_planner_plans_in_the_idle_class_with_idle(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ks.db'}"
    assert _planner(url, "--idle", "--nice", "2") == {"idle": True, "nice": 2}
    assert _planner(url, "--nice", "3") == {"idle": False, "nice": 3}  # --nice alone


def test_the_planner_commits_without_waiting_for_the_disk_with_async_commit(
        database_url: str) -> None:
    fast = _planner(database_url, "--async-commit")
    plain = _planner(database_url)
    if database_url.startswith("sqlite"):  # nothing to set there; the planner still plans
        assert "ours" not in fast and "ours" not in plain
        return
    assert (fast["ours"], fast["optuna"]) == ("off", "off")
    assert (plain["ours"], plain["optuna"]) == ("on", "on")


class _Started:
    """A stand-in for ``subprocess.Popen``: records the commands ``serve`` starts."""

    commands: list[list[str]] = []

    def __init__(self, command: list[str], **_kwargs: Any) -> None:
        self.commands.append(command)
        self.pid = 0

    def terminate(self) -> None:
        pass

    def wait(self, timeout: float | None = None) -> int:
        return 0


@pytest.mark.parametrize(("args", "idle", "async_commit"), [
    ([], True, True), (["--no-planner-idle"], False, True),
    (["--no-planner-async-commit"], True, False)])
def test_serve_starts_its_planner_idle_and_committing_without_waiting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], idle: bool,
        async_commit: bool) -> None:
    import uvicorn

    monkeypatch.setenv("KS_DATABASE_URL", f"sqlite:///{tmp_path / 'ks.db'}")
    monkeypatch.setenv("KS_PLANNING", "background")
    monkeypatch.setenv("KS_MIGRATE_ON_STARTUP", "false")
    monkeypatch.setattr(subprocess, "Popen", _Started)
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    monkeypatch.setattr(_Started, "commands", [])
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["serve", "--worker", "no", *args])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    planners = [c for c in _Started.commands if "planner" in c]
    assert len(planners) == 1, _Started.commands
    command = planners[0]
    assert ("--idle" in command, "--no-idle" in command) == (idle, not idle)
    assert ("--async-commit" in command,
            "--no-async-commit" in command) == (async_commit, not async_commit)
    assert command[command.index("--nice") + 1] == "10"
