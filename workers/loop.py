"""A GPU host's agent: register, lease candidates, run each in isolation, report at once.

The loop talks to the service over HTTP only (``service.client``); it never touches the
database. Each measurement is reported as soon as it exists, so a crash of the worker loses at
most the candidate in flight (its lease expires and the service hands it out again). A report
that cannot be delivered is kept and retried before the next lease.

While the service is unreachable or answers 5xx/429 (restarting, its database down) the loop
waits with jittered exponential back-off (``service.client.backoff``, from ``poll_s`` up to
``max_backoff_s``) and goes on: registering, leasing and delivering kept reports alike. A worker
the service no longer knows (404 on lease) registers again.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from search.types import Candidate, Device, Measurement
from service.client import KernelSearchClient, KernelSearchError, backoff, retryable
from workers.identity import SecretFile

log = logging.getLogger("kernelsearch.worker")


class Runner(Protocol):
    """Runs one candidate and says how it went (``workers.isolation.IsolatedRunner``)."""

    def run(self, candidate: Candidate) -> Measurement: ...


@dataclass
class WorkerStats:
    leased: int = 0
    reported: int = 0
    by_status: dict[str, int] = field(default_factory=dict)


class WorkerLoop:
    """Lease → run → report, until stopped (or idle for ``idle_exit_s``)."""

    def __init__(self, client: KernelSearchClient, runner: Runner, device: Device, *,
                 name: str | None = None, batch: int = 8, poll_s: float = 1.0,
                 on_result: Callable[[Candidate, Measurement], None] | None = None,
                 catalogues: dict[str, dict[str, Any]] | None = None,
                 max_backoff_s: float = 30.0, rng: random.Random | None = None,
                 secret_file: SecretFile | None = None) -> None:
        self.client = client
        #: declared at registration, by ``"<kind>/<backend>"`` (``workers.device.catalogues``)
        self.catalogues = dict(catalogues or {})
        self.runner = runner
        self.device = device
        self.name = name or socket.gethostname()
        self.batch = batch
        self.poll_s = poll_s
        self.max_backoff_s = max(poll_s, max_backoff_s)
        self._rng = rng
        self.on_result = on_result
        self.stats = WorkerStats()
        self.worker_id: int | None = None
        self._unsent: list[tuple[str, dict[str, Any]]] = []
        #: where this worker's secret survives a restart (None: kept in memory only)
        self.secret_file = secret_file

    def register(self) -> int:
        """Register (again) with the secret kept from the first registration; a secret the
        service issues is kept for the next start."""
        if self.client.worker_secret is None and self.secret_file is not None:
            self.client.worker_secret = self.secret_file.load()
        reply = self.client.register_worker(self.name, self.device.to_dict(),
                                            self.catalogues or None)
        if reply.get("worker_secret") and self.secret_file is not None:
            self.secret_file.save(str(reply["worker_secret"]))
        self.worker_id = int(reply["worker_id"])
        log.info("registered as worker %s for %s", self.worker_id, reply.get("gpu_model"))
        return self.worker_id

    def run(self, stop: threading.Event | None = None, idle_exit_s: float | None = None) -> None:
        stop = stop or threading.Event()
        idle_since = time.monotonic()
        failures = 0  # consecutive attempts the service could not answer
        while not stop.is_set():
            try:
                if self.worker_id is None:
                    self.register()
                self._flush_unsent()
                worked = self.run_once(stop)
            except KernelSearchError as exc:
                if exc.status_code == 404 and self.worker_id is not None:
                    # The service lost track of this worker (a new database): register again.
                    log.warning("the service does not know worker %s: registering again (%s)",
                                self.worker_id, exc)
                    self.worker_id = None
                    continue
                if not retryable(exc):
                    raise
                # The service is down, restarting or without its database: leases held now
                # expire on their own and their candidates go back to the queue; keep asking.
                wait = backoff(failures, self.poll_s, self.max_backoff_s, self._rng)
                failures += 1
                log.warning("service unavailable (%s); retrying in %.1f s", exc, wait)
                stop.wait(wait)
                continue
            failures = 0
            if worked:
                idle_since = time.monotonic()
                continue
            if idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                return
            stop.wait(self.poll_s)

    def run_once(self, stop: threading.Event | None = None) -> bool:
        """Lease one batch and work through it; False when there was nothing to do."""
        assert self.worker_id is not None, "register() first"
        lease = self.client.lease(self.worker_id, self.batch)
        candidates = [Candidate.from_dict(c) for c in lease.get("candidates", [])]
        if not candidates:
            return False
        self.stats.leased += len(candidates)
        lease_id = str(lease["lease_id"])
        log.info("lease %s: candidates %s (earlier attempts %s)", lease_id,
                 [c.id for c in candidates], [c.get("attempts", 0) for c in lease["candidates"]])
        expired = threading.Event()
        beat = _Heartbeat(self.client, self.worker_id, lease_id,
                          float(lease.get("lease_seconds") or 60.0), expired)
        beat.start()
        try:
            prepare = getattr(self.runner, "prepare", None)
            if prepare is not None:
                prepare(candidates)
            for candidate in candidates:
                if expired.is_set() or (stop is not None and stop.is_set()):
                    # The lease is gone (its candidates went back to the queue) or we stop.
                    break
                measurement = self.runner.run(candidate)
                self._report(lease_id, candidate, measurement)
        finally:
            beat.stop()
        return True

    def _report(self, lease_id: str, candidate: Candidate, measurement: Measurement) -> None:
        status = str(measurement.status)
        self.stats.by_status[status] = self.stats.by_status.get(status, 0) + 1
        result = {"candidate_id": candidate.id, "measurement": measurement.to_dict()}
        try:
            self._deliver(lease_id, result)
        except (KernelSearchError, OSError) as exc:
            if isinstance(exc, KernelSearchError) and not retryable(exc):
                log.warning("report of candidate %s refused: %s", candidate.id, exc)
            else:
                log.warning("report of candidate %s failed, kept for retry: %s",
                            candidate.id, exc)
                self._unsent.append((lease_id, result))
        if self.on_result is not None:
            self.on_result(candidate, measurement)

    def _deliver(self, lease_id: str, result: dict[str, Any]) -> None:
        """Send one report; the service's answer (stored, or refused and why) goes to the log."""
        reply = self.client.report(self.worker_id, lease_id, [result])
        self.stats.reported += 1
        cid = result["candidate_id"]
        for refused in reply.get("rejected") or ():
            log.warning("report of candidate %s (lease %s) refused: %s", cid, lease_id,
                        refused.get("reason"))
        if cid in (reply.get("accepted") or ()):
            log.info("report of candidate %s (lease %s) stored: %s", cid, lease_id,
                     result["measurement"].get("status"))

    def _flush_unsent(self) -> None:
        """Deliver the kept reports, oldest first; stops at the first the service cannot take
        yet (raising, so that the loop backs off) and drops one it refuses outright."""
        while self._unsent:
            lease_id, result = self._unsent[0]
            try:
                self._deliver(lease_id, result)
            except KernelSearchError as exc:
                if retryable(exc):
                    raise
                log.warning("kept report of candidate %s refused: %s",
                            result["candidate_id"], exc)
            self._unsent.pop(0)


class _Heartbeat(threading.Thread):
    """Renews a lease every third of its length while its batch runs."""

    def __init__(self, client: KernelSearchClient, worker_id: int, lease_id: str,
                 lease_seconds: float, expired: threading.Event) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{lease_id[:8]}")
        self.client, self.worker_id, self.lease_id = client, worker_id, lease_id
        self.interval = max(0.2, lease_seconds / 3.0)
        self.expired = expired
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            try:
                self.client.renew(self.worker_id, self.lease_id)
            except KernelSearchError as exc:
                if exc.status_code in (404, 409, 410):
                    log.warning("lease %s is gone: %s", self.lease_id, exc)
                    self.expired.set()
                    return
                log.warning("renewing lease %s failed, will try again: %s", self.lease_id, exc)
            except OSError as exc:  # the service may be restarting: keep trying
                log.warning("renewing lease %s failed: %s", self.lease_id, exc)

    def stop(self) -> None:
        self._halt.set()
