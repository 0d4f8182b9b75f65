"""The API process SIGKILLed in the middle of a job and started again on the same port: the
workers back off and retry, keep the reports they could not deliver and deliver them once it is
back, the job resumes and completes, and the Optuna study keeps every trial it had and its best.
Real processes on SQLite and Postgres (``tests/deploy/cluster.py``).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_tuner import study_name
from search.optimizer import storage_for
from search.types import INTERPRETER_GPU
from tests.deploy.cluster import (
    FORCE,
    PROBLEM,
    Cluster,
    assert_each_measured_once,
    assert_studies_match,
    state,
    wait_until,
)

pytestmark = [pytest.mark.faults, pytest.mark.slow]

STUDY = study_name(GemmProblem.from_dict(PROBLEM), INTERPRETER_GPU, "tiles")
_BACKOFF = re.compile(r"service unavailable .*; retrying in ([\d.]+) s")


def _complete(url: str) -> dict[int, float]:
    """The study's complete trials and their values (none before the study exists)."""
    storage = storage_for(url)
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    if STUDY not in names:
        return {}
    trials = optuna.load_study(study_name=STUDY, storage=storage).get_trials(
        deepcopy=False, states=(TrialState.COMPLETE,))
    return {t.number: float(t.value) for t in trials if t.value is not None}


def test_the_api_killed_mid_job_and_restarted(database_url: str, tmp_path: Path) -> None:
    with Cluster(tmp_path, database_url, lease_seconds=20) as cl:
        cl.migrate()
        api = cl.api("api")
        workers = [cl.worker("w1", api), cl.worker("w2", api)]
        # the whole budget (no early stop), so that the job surely goes on after the restart
        job = cl.client(api).submit_job(PROBLEM, budget={"max_trials": 10},
                                        policy={**FORCE, "full_search": True})
        wait_until(lambda: len(_complete(cl.db.url)) >= 3, 180, "three trials told",
                   cl._dump, every_s=0.05)
        api.proc.signal(signal.SIGKILL)
        api.proc.popen.wait(timeout=10)
        before = _complete(cl.db.url)
        best_before = min(before.values())
        # The API stays down until a worker has found it gone and backed off (a trial in
        # flight can keep both workers away from the API for a while on a loaded machine).
        wait_until(lambda: any(_BACKOFF.search(w.log()) for w in workers), 120,
                   "a worker backing off while the API is down", cl._dump, every_s=0.1)
        assert all(w.alive for w in workers)

        again = cl.api("api-again", port=api.port)
        final = cl.wait_job(again, job["id"])
        after = _complete(cl.db.url)
        st = state(cl.db, job["id"])
        assert_studies_match(cl.db, [st])
        logs = [w.log() for w in workers]
        alive = all(w.alive for w in workers)

    assert final["status"] == "done" and final["decision"] is not None, final
    assert alive
    # The study kept every trial it had, with its value, and so its best.
    assert {n: after.get(n) for n in before} == before
    assert min(after.values()) <= best_before
    assert final["progress"]["trials_done"] == 10 and len(after) > len(before)
    # Each candidate was measured once: what was kept while the API was down was delivered.
    assert_each_measured_once(st)
    waits = [float(w) for text in logs for w in _BACKOFF.findall(text)]
    assert waits, "no worker backed off while the API was down"
    kept = {int(c) for text in logs
            for c in re.findall(r"report of candidate (\d+) failed, kept for retry", text)}
    for cid in kept:
        assert len(st.measurements_of(cid)) == 1, cid
