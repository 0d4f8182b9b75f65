"""The planner's CPU priority: ``kernelsearch planner --idle`` runs in the kernel's idle
scheduling class (``SCHED_IDLE``), and ``kernelsearch serve`` starts its planner so unless told
``--no-planner-idle``, so that on a host the API shares a request waking up never waits behind
the planner."""

from __future__ import annotations

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
#: class is the process's: never the test runner's) and prints what planning ran under
_PLANNER = """
import os, sys
from typer.testing import CliRunner
from service.cli import app
from service.planner import Planner
before, seen = os.nice(0), {}
def drain(self, max_steps=1000):
    seen.update(idle=os.sched_getscheduler(0) == os.SCHED_IDLE, nice=os.nice(0) - before)
    return 0
Planner.drain = drain
r = CliRunner().invoke(app, ["planner", "--drain", *sys.argv[1:]])
assert r.exit_code == 0, r.output
print(seen["idle"], seen["nice"])
"""


def _planner(tmp_path: Path, *args: str) -> str:
    env = dict(os.environ, KS_DATABASE_URL=f"sqlite:///{tmp_path / 'ks.db'}",
               KS_PLANNING="background")
    done = subprocess.run([sys.executable, "-c", _PLANNER, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="no idle scheduling class here")
def test_the_planner_plans_in_the_idle_class_with_idle(tmp_path: Path) -> None:
    assert _planner(tmp_path, "--idle", "--nice", "2") == "True 2"
    assert _planner(tmp_path, "--nice", "3") == "False 3"  # --nice alone, as before


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


@pytest.mark.parametrize(("args", "idle"), [([], True), (["--no-planner-idle"], False)])
def test_serve_starts_its_planner_in_the_idle_class(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    args: list[str], idle: bool) -> None:
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
    assert ("--idle" in planners[0]) is idle and ("--no-idle" in planners[0]) is not idle
    assert planners[0][planners[0].index("--nice") + 1] == "10"
