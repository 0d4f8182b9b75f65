"""A worker SIGKILLed in the middle of a batch: its lease runs out, the candidates it held go to
another worker (leasing through the other API process), the job completes, and no measurement
is lost or stored twice. Real processes on SQLite and Postgres (``tests/deploy/cluster.py``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.deploy.cluster import (
    FORCE,
    PROBLEM,
    Cluster,
    assert_each_measured_once,
    assert_studies_match,
    leases,
    state,
    stored,
    wait_until,
)

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_worker_killed_mid_batch(database_url: str, tmp_path: Path) -> None:
    with Cluster(tmp_path, database_url, lease_seconds=5) as cl:
        cl.migrate()
        api1, api2 = cl.api("api1"), cl.api("api2")
        doomed = cl.worker("doomed", api1, batch=4)
        job = cl.client(api1).submit_job(PROBLEM, budget={"max_trials": 8}, policy=FORCE)

        def mid_batch() -> bool:
            st = state(cl.db, job["id"])
            held = [c for c in st.trials if c.status == "leased"]
            return len(held) >= 2 and any(st.measurements_of(c.id) for c in st.trials)

        wait_until(mid_batch, 180, "the worker in the middle of a batch of trials", cl._dump,
                   every_s=0.05)
        doomed.signal(signal.SIGKILL)
        doomed.popen.wait(timeout=10)
        # Nobody leases until the rescuer starts, so nothing has expired yet.
        before = state(cl.db, job["id"])
        held = {c.id for c in before.candidates if c.status == "leased"}
        by_doomed = {c for c, ms in before.measured.items() for m in ms
                     if before.workers[m.worker_id or 0] == "doomed"}
        assert held and by_doomed
        # Its benchmark child does not outlive it (on a GPU it would hold the device).
        wait_until(lambda: _group_gone(doomed.pid), 30, "the killed worker's child to exit")

        rescuer = cl.worker("rescuer", api2, batch=4)
        final = cl.wait_job(api2, job["id"])
        after = state(cl.db, job["id"])
        assert_studies_match(cl.db, [after])
        handed = leases([doomed, rescuer])
        doomed_stored = stored(doomed)

    assert final["status"] == "done", final
    assert_each_measured_once(after)
    rows = {c.id: c for c in after.candidates}
    for cid in held:  # its lease expired, then the rescuer ran it: one measurement
        assert [after.workers[m.worker_id or 0] for m in after.measurements_of(cid)] == \
            ["rescuer"], cid
        got = [(x.worker, x.attempts) for x in handed if x.candidate == cid]
        last_doomed = max(a for w, a in got if w == "doomed")
        assert rows[cid].attempts > last_doomed
        assert [a for w, a in got if w == "rescuer"][0] > last_doomed, got
    # What the killed worker was told was stored is there (the kill can fall between the API
    # storing a report and the worker logging it, so the log may name fewer), and stays, and is
    # not run again.
    assert doomed_stored <= by_doomed
    for cid in by_doomed:
        assert [after.workers[m.worker_id or 0] for m in after.measurements_of(cid)] == \
            ["doomed"]
        assert not [x for x in handed if x.candidate == cid and x.worker == "rescuer"]
    # The job's count of trials is the number of custom trials measured, each once.
    custom = [c for c in after.trials if c.status in ("done", "failed")]
    assert final["progress"]["trials_done"] == len(custom)
