"""The team topology as real processes, for the deployment and fault tests.

Each piece is its own OS process in its own process group, as in a deployment: the schema step
(``kernelsearch migrate``), API processes (``kernelsearch serve --worker no``: uvicorn) and
workers (``kernelsearch worker`` on the Triton interpreter, each with its benchmark child).
Their output goes to log files the tests read (the worker logs each lease and the fate of each
report). :class:`Cluster` starts them, kills or pauses them on demand and stops every process
group it started when it closes; :func:`state` reads back what the database holds.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from db import candidates as cands
from db import jobs
from db import workers as worker_rows
from db.engine import Database
from db.models import MeasurementRow, WorkerRow
from db.records import CandidateRecord, JobRecord, MeasurementRecord
from service.client import KernelSearchClient
from service.embedded import free_port
from workers.identity import SecretFile

REPO = Path(__file__).resolve().parents[2]
#: A small GEMM the interpreter runs in well under a second per candidate.
PROBLEM = {"kind": "gemm", "m": 64, "n": 48, "k": 80, "dtype": "fp16"}
#: The custom stage runs whatever the library's efficiency on this CPU: these tests are about
#: leases and reports, not about the verdict.
FORCE = {"force_custom": True}
FINISHED = ("done", "failed", "cancelled")


class Proc:
    """One process (and its group: a worker's benchmark child belongs to it), logging to a
    file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.args, self.log_path = name, args, log
        with open(log, "ab") as out:
            self.popen = subprocess.Popen(args, cwd=REPO, env=env, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int, *, group: bool = False) -> None:
        if group:
            os.killpg(self.pid, sig)
        else:
            os.kill(self.pid, sig)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """End the process group: SIGCONT (if paused), SIGTERM, then SIGKILL."""
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                return
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


@dataclass
class Api:
    proc: Proc
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Cluster:
    """Processes of one topology on one database; use as a context manager."""

    def __init__(self, tmp_path: Path, database_url: str, *, lease_seconds: float = 10.0,
                 check_url: str | None = None, **env: str) -> None:
        """``check_url``: where the test reads the database (default: ``database_url``, the
        processes' own)."""
        self.dir = tmp_path
        self.database_url = database_url
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("KS_")}
        self.env.update({
            "KS_DATABASE_URL": database_url, "KS_LEASE_SECONDS": str(lease_seconds),
            "KS_MIGRATE_ON_STARTUP": "false", "KS_RETRY_AFTER_S": "1", "KS_POLL_S": "0.2",
            "KS_MAX_BACKOFF_S": "2", "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1",
            "KS_STATE_DIR": str(tmp_path / "worker-state"),  # the workers' secrets
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        })
        self.env.update(env)
        self.procs: list[Proc] = []
        self.db = Database(check_url or database_url)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.db.dispose()

    def _start(self, name: str, args: list[str], **env: str) -> Proc:
        proc = Proc(name, args, {**self.env, **env}, self.dir / f"{name}.log")
        self.procs.append(proc)
        return proc

    # -- the pieces -------------------------------------------------------------------------
    def migrate(self) -> None:
        """The one-shot schema step a deployment runs before its API processes."""
        out = subprocess.run([sys.executable, "-m", "service.cli", "migrate"], cwd=REPO,
                             env=self.env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr

    def api(self, name: str, port: int | None = None, **env: str) -> Api:
        """An API process (uvicorn) on ``port`` (a free one by default), once it is ready."""
        port = port or free_port()
        proc = self._start(name, [sys.executable, "-m", "service.cli", "serve", "--host",
                                  "127.0.0.1", "--port", str(port), "--worker", "no"], **env)
        api = Api(proc, port)
        wait_until(lambda: _ready(api) or not proc.alive, 60, f"{name} ready")
        assert proc.alive, proc.log()
        return api

    def worker(self, name: str, api: Api, *, gpu_model: str | None = None, batch: int = 2,
               **env: str) -> Proc:
        """A worker process on the Triton interpreter, leasing from ``api``; ``gpu_model``
        registers it under another GPU model name (``tests/deploy/renamed_worker.py``)."""
        cli = (["-m", "service.cli"] if gpu_model is None else
               ["-m", "tests.deploy.renamed_worker", gpu_model])
        return self._start(name, [sys.executable, *cli, "worker", "--url", api.url,
                                  "--interpret", "--batch", str(batch)],
                           KS_WORKER_NAME=name, **env)

    def worker_secret(self, worker_id: int, api: Api) -> str:
        """The secret worker ``worker_id`` keeps (in the cluster's ``KS_STATE_DIR``), for a
        test that calls under its id."""
        with self.db.read_session() as s:
            record = worker_rows.get_worker(s, worker_id)
        assert record is not None, f"worker {worker_id} is not registered"
        secret = SecretFile(self.dir / "worker-state", api.url, record.name).load()
        assert secret is not None, f"worker {record.name} keeps no secret"
        return secret

    def client(self, api: Api, **kw: Any) -> KernelSearchClient:
        return KernelSearchClient(api.url, **{"retries": 6, "backoff_s": 0.3, **kw})

    # -- waiting ----------------------------------------------------------------------------
    def wait_job(self, api: Api, job_id: int, timeout_s: float = 240.0) -> dict[str, Any]:
        client = self.client(api, retries=20)
        job: dict[str, Any] = {}

        def finished() -> bool:
            nonlocal job
            job = client.get_job(job_id)
            return job["status"] in FINISHED

        wait_until(finished, timeout_s, f"job {job_id} finished", self._dump)
        client.close()
        return job

    def _dump(self) -> str:
        return "\n".join(f"--- {p.name} (alive={p.alive}) ---\n{p.log()[-4000:]}"
                         for p in self.procs)


def _ready(api: Api) -> bool:
    try:
        return httpx.get(f"{api.url}/readyz", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str,
               dump: Callable[[], str] | None = None, every_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}"
                                 + (f"\n{dump()}" if dump else ""))
        time.sleep(every_s)


# -- what the database holds ---------------------------------------------------------------
@dataclass(frozen=True)
class State:
    """One job's rows: its candidates, every measurement of each, and worker names by id."""

    job: JobRecord
    candidates: list[CandidateRecord]
    measured: dict[int, list[MeasurementRecord]]
    workers: dict[int, str]

    def measurements_of(self, candidate_id: int) -> list[MeasurementRecord]:
        return self.measured.get(candidate_id, [])

    @property
    def trials(self) -> list[CandidateRecord]:
        """Kernel candidates that stand for an Optuna trial."""
        return [c for c in self.candidates if c.trial_number is not None]


def state(db: Database, job_id: int) -> State:
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert job is not None
        rows = cands.job_candidates(s, job_id)
        measured: dict[int, list[MeasurementRecord]] = {}
        for m in s.query(MeasurementRow).filter(MeasurementRow.job_id == job_id).all():
            measured.setdefault(int(m.candidate_id or 0), []).append(MeasurementRecord.of(m))
        names = {int(w.id): w.name for w in s.query(WorkerRow).all()}
    return State(job, rows, measured, names)


def assert_each_measured_once(st: State) -> None:
    """Every candidate that ran ok or failed has exactly one measurement, none has two, and a
    measurement's GPU model is its job's."""
    for c in st.candidates:
        got = st.measurements_of(c.id)
        assert len(got) <= 1, f"candidate {c.id} measured {len(got)} times"
        if c.status in ("done", "failed") and not (c.failure_reason or "").startswith("lease"):
            assert len(got) == 1, f"candidate {c.id} is {c.status} without a measurement"
        for m in got:
            assert m.gpu_model == st.job.bound_gpu


def assert_studies_match(db: Database, states: list[State]) -> None:
    """The jobs' Optuna studies (one per problem, GPU model and tier) hold exactly the jobs'
    measured trials: each told once, as measured (the median, or the penalty when it failed),
    and nothing else but what the study settled by itself (configurations measured before,
    reused; ones breaking a static rule). So no trial is double-counted, none is lost, and no
    other GPU model's measurement is in the study."""
    import optuna
    from optuna.trial import TrialState

    from search.kinds.gemm.spec import GemmProblem
    from search.kinds.gemm.triton_tuner import study_name
    from search.optimizer import PENALTY_US, storage_for

    storage = storage_for(db.url)
    by_study: dict[str, list[tuple[CandidateRecord, MeasurementRecord | None]]] = {}
    for st in states:
        problem = st.job.problem
        assert isinstance(problem, GemmProblem)
        for c in st.trials:
            got = st.measurements_of(c.id)
            name = study_name(problem, st.job.bound_gpu or "", c.tier)
            by_study.setdefault(name, []).append((c, got[0] if got else None))
    for name, rows in by_study.items():
        trials = {t.number: t for t in optuna.load_study(study_name=name,
                                                         storage=storage).trials}
        numbers = [c.trial_number for c, _ in rows]
        assert len(numbers) == len(set(numbers)), f"{name}: a trial stands for two candidates"
        # a candidate cancelled before its report came closed its trial unmeasured (pruned)
        measured = {c.trial_number: m for c, m in rows if m is not None
                    and c.status != "cancelled"}
        for number, m in measured.items():
            t = trials[number]
            assert t.state == TrialState.COMPLETE, (name, number, t.state)
            assert t.value == (m.median_us if m.status == "ok" else PENALTY_US), (name, number)
        told = {n for n, t in trials.items() if t.state == TrialState.COMPLETE
                and not t.user_attrs.get("reused") and "invalid" not in t.user_attrs}
        assert told == set(measured), (name, sorted(told ^ set(measured)))


# -- what the workers logged ----------------------------------------------------------------
_LEASE = re.compile(r"lease (\S+): candidates \[([\d, ]*)\] \(earlier attempts \[([\d, ]*)\]\)")
_STORED = re.compile(r"report of candidate (\d+) \(lease (\S+)\) stored")
_REFUSED = re.compile(r"report of candidate (\d+) \(lease (\S+)\) refused: (.*)")


@dataclass(frozen=True)
class Leased:
    worker: str
    lease: str
    candidate: int
    attempts: int


def leases(procs: list[Proc]) -> list[Leased]:
    """Every candidate each worker was handed, from the workers' logs."""
    out: list[Leased] = []
    for p in procs:
        for lease, ids, attempts in _LEASE.findall(p.log()):
            for cid, att in zip(_ints(ids), _ints(attempts), strict=True):
                out.append(Leased(p.name, lease, cid, att))
    return out


def stored(proc: Proc) -> set[int]:
    return {int(c) for c, _ in _STORED.findall(proc.log())}


def refused(proc: Proc) -> dict[int, str]:
    return {int(c): why for c, _, why in _REFUSED.findall(proc.log())}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


@contextmanager
def paused(proc: Proc) -> Iterator[None]:
    """The worker and its benchmark child stopped (SIGSTOP) inside the block: a host that
    froze, or a network partition, for as long as the block lasts."""
    proc.signal(signal.SIGSTOP, group=True)
    try:
        yield
    finally:
        proc.signal(signal.SIGCONT, group=True)
