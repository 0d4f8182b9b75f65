"""The planner: the decision loop run beside the API rather than inside its requests.

With ``KS_PLANNING=background`` a lease only hands out what is queued, a report only stores its
results, and both mark the jobs they touched (``plan_marks``, in the transaction of the
change). The planner claims marked jobs (``FOR UPDATE SKIP LOCKED``: several planners share the
marks), tells each tier's Optuna study what its trials measured (``AgentLoop.settle``), and
advances the job: proposals, verification, the decision. It also finishes running jobs whose
time budget ran out, and those whose decision waited for the re-measurement of held results
(``KS_HELD_WAIT_SECONDS``) past the wait.

Nothing is lost on a crash: a mark is cleared by the claim, and a planner that dies before
planning leaves results stored and trials running; the next mark of the job (or
``AgentLoop._settle_stale`` a lease later) tells them. ``kernelsearch planner`` runs one, and
``kernelsearch serve`` starts one beside its API processes in this mode, at a lower CPU
priority than theirs (``nice``), so on a busy host requests answer first and planning waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from db import jobs
from db.records import JobStatus
from service.agent_loop import RECHECK, time_up
from service.flow import Flow
from service.outages import describe, outage_of

log = logging.getLogger("kernelsearch.planner")

#: Jobs claimed at a time: a claim's marks are cleared together, so a small batch keeps the
#: marks of the rest visible to other planners.
BATCH = 8
#: How often running jobs with a time budget are checked for an expired budget, and those
#: waiting for held results' re-measurement for the end of the wait.
DEADLINE_EVERY_S = 1.0
#: How often running jobs with nothing outstanding are marked: a mark cleared by a claim whose
#: planning then failed with the database (so it could not be marked again) is not lost.
IDLE_EVERY_S = 10.0


class Planner:
    """Plans the jobs the API marked; one per process (``step``, ``drain`` or ``run``)."""

    def __init__(self, flow: Flow, *, batch: int = BATCH,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.flow = flow
        self.batch = batch
        self.monotonic = monotonic
        self.planned = 0
        self._deadlines_at = self._idle_at = -1e18

    def step(self) -> int:
        """Plan one batch of marked jobs (and, every ``DEADLINE_EVERY_S``, the running jobs
        out of time or done waiting for held results); returns how many jobs were claimed.
        A job whose planning failed is logged and left to its next mark; on a database
        outage the claimed jobs not planned are marked again and the outage is raised
        (``run`` waits and retries)."""
        with self.flow.db.session() as s:
            ids = jobs.claim_due(s, self.batch)
        for n, job_id in enumerate(ids):
            try:
                self._plan(job_id)
            except Exception as exc:
                if outage_of(exc) is not None:
                    self._mark_again(ids[n:])
                    raise
                # not marked again at once (it would fail first in every claim, ahead of the
                # rest): its next change, or the idle sweep, marks it again
                log.exception("planning job %s failed", job_id)
        self.planned += len(ids)
        now = self.monotonic()
        if now - self._deadlines_at >= DEADLINE_EVERY_S:
            self._deadlines_at = now
            self._deadlines()
        if now - self._idle_at >= IDLE_EVERY_S:
            self._idle_at = now
            with self.flow.db.session() as s:
                jobs.mark_due(s, jobs.running_idle(s))
        return len(ids)

    def drain(self, max_steps: int = 1000) -> int:
        """Plan until nothing is marked (tests, and a one-shot ``planner --drain``); returns
        the jobs planned."""
        total = 0
        for _ in range(max_steps):
            n = self.step()
            total += n
            if n == 0:
                return total
        raise RuntimeError(f"jobs still marked after {max_steps} planning steps")

    def run(self, stop: threading.Event, *, poll_s: float = 0.05,
            max_backoff_s: float = 5.0) -> None:
        """Plan until ``stop`` is set: at once while jobs are marked, every ``poll_s`` when
        none is, with a growing pause while the database is unreachable."""
        backoff = poll_s
        while not stop.is_set():
            try:
                n = self.step()
                backoff = poll_s
            except Exception as exc:
                outage = outage_of(exc)
                if outage is None:
                    log.exception("planner step failed")
                else:
                    log.warning("database unreachable (%s): planning again in %.1f s",
                                describe(outage), backoff)
                stop.wait(backoff)
                backoff = min(max_backoff_s, backoff * 2)
                continue
            if n == 0:
                stop.wait(poll_s)

    def _plan(self, job_id: int) -> None:
        job = self.flow.job(job_id)
        self.flow.agent.settle(job)
        if job.status == JobStatus.RUNNING:
            self.flow.agent.advance(job_id)

    def _mark_again(self, job_ids: list[int]) -> None:
        try:
            with self.flow.db.session() as s:
                jobs.mark_due(s, job_ids)
        except Exception:  # the database is gone: the idle sweep marks them again later
            log.exception("could not mark jobs %s again", job_ids)

    def _deadlines(self) -> None:
        now = self.flow.clock()
        held_before = now - timedelta(seconds=self.flow.settings.held_wait_seconds)
        with self.flow.db.read_session() as s:
            late = {j.id for j in jobs.running_with_deadline(s) if time_up(j, now)}
            late.update(jobs.held_waits_over(s, RECHECK, held_before))
        for job_id in sorted(late):
            self.flow.agent.advance(job_id)
