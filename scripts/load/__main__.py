"""``python -m scripts.load run --db URL``: seed (if empty), serve, drive with locust, report.

    python -m scripts.load run --db postgresql+psycopg://postgres@127.0.0.1:5432/ks_load \
        --processes 2 --duration 60 --label "2 API processes"

Seeds the database with ``scripts.dashboard.seed`` when it holds no problem (10,000 problems,
1,000,000 measurements), starts ``kernelsearch serve --processes N --no-access-log`` on
``--url``, runs locust headless (``scripts/load/locustfile.py``: ``--users`` clients and
``--workers`` simulated workers) after asking every ``GET /v1/best`` question twice (the
steady state of a service, not its first minute; ``--no-warm``), samples the load average,
and writes ``<out>/load_<date>.md`` and ``.json`` (each run of the date kept, by label). A
benchmark, not a test: its numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlalchemy import delete, func, select, update

from db.engine import Database
from db.models import CandidateRow, JobRow, PlanMarkRow, ProblemRow
from db.records import ACTIVE_JOB, OUTSTANDING, CandidateStatus, JobStatus
from scripts.dashboard import timings
from scripts.dashboard.seed import seed_database
from scripts.load import report, shapes

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
#: the seeded GPU model the simulated workers claim to be
GPU = "NVIDIA H100 80GB HBM3 (synthetic)"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.load",
                                 description=(__doc__ or "").strip().splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="seed if empty, serve, drive with locust, report")
    run.add_argument("--db", required=True, help="SQLAlchemy URL of a Postgres database")
    run.add_argument("--url", default="http://127.0.0.1:8077", help="where the API listens")
    run.add_argument("--processes", type=int, default=1, help="API processes")
    run.add_argument("--users", type=int, default=200, help="concurrent clients")
    run.add_argument("--client-rps", type=float, default=3.1,
                     help="requests per second of each client (200 x 3.1: 558 GET /v1/best/s)")
    run.add_argument("--job-share", type=float, default=0.1,
                     help="share of the clients' requests that submit a job")
    run.add_argument("--workers", type=int, default=16, help="simulated workers")
    run.add_argument("--measure-s", type=float, default=0.25,
                     help="seconds a simulated worker spends per leased candidate before it "
                          "reports (a GPU's time to compile and time it; 0: report at once)")
    run.add_argument("--planning", choices=("inline", "background"), default="background",
                     help="KS_PLANNING of the API: background starts a planner process "
                          "beside the API processes (kernelsearch serve does)")
    run.add_argument("--duration", type=int, default=60, help="seconds after the ramp-up")
    run.add_argument("--spawn-rate", type=float, default=50.0, help="users started per second")
    run.add_argument("--no-warm", dest="warm", action="store_false",
                     help="skip asking every GET /v1/best question twice before the run")
    run.add_argument("--label", default=None, help="the run's name in the report")
    run.add_argument("--note", default=None, help="a sentence added under the run's table")
    run.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    again = sub.add_parser("report", help="write the Markdown of a JSON report again (after "
                                          "editing a run's note)")
    again.add_argument("json", type=Path)
    args = ap.parse_args(argv)
    if args.command == "report":
        md = args.json.with_suffix(".md")
        old = md.read_text() if md.exists() else None
        md.write_text(report.markdown(json.loads(args.json.read_text()),
                                      report.kept_findings(old)))
        return 0
    return _run(args, "python -m scripts.load " + shlex.join(argv or sys.argv[1:]))


def _run(args: argparse.Namespace, command: str) -> int:
    _seed_if_empty(args.db)
    left = _cancel_active(args.db)
    if left:
        print(f"cancelled {left} jobs left queued or running (an earlier run's)",
              file=sys.stderr)
    database = timings.counts(args.db)
    with tempfile.TemporaryDirectory(prefix="ks-load-") as tmp:
        shapes_file = Path(tmp) / "shapes.json"
        picked = shapes.pick(args.db, 2000, GPU)
        shapes_file.write_text(json.dumps(picked))
        server = _serve(args)
        try:
            _wait_ready(args.url, server)
            if args.warm:
                _warm(args.url, picked["best"])
            before = [round(x, 2) for x in os.getloadavg()]
            sampler = _LoadSampler()
            sampler.start()
            _locust(args, shapes_file, Path(tmp) / "stats")
            sampler.stop()
        finally:
            _stop(server)
        rows = report.endpoints(Path(tmp) / "stats_stats.csv")
        failed = report.failures(Path(tmp) / "stats_failures.csv")
    now = datetime.now(UTC).replace(microsecond=0)
    run = {"label": args.label or f"{args.processes} API process(es)", "date": now.isoformat(),
           "command": command, "commit": timings._commit(),
           "machine": {**timings.machine(), "locust": version("locust")},
           "database": database, "processes": args.processes, "users": args.users,
           "offered_rps": args.users * args.client_rps, "job_share": args.job_share,
           "workers": args.workers, "measure_s": args.measure_s, "planning": args.planning,
           "duration_s": args.duration, "warm": args.warm,
           "load_average": {"before": before, **sampler.summary()},
           "endpoints": rows, "failures": failed, "targets": report.verdict(rows),
           "note": args.note}
    path = args.out / f"load_{now.date().isoformat()}.json"
    runs = [r for r in (json.loads(path.read_text()) if path.exists() else [])
            if r["label"] != run["label"]] + [run]
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(runs, indent=1) + "\n")
    md = path.with_suffix(".md")
    md.write_text(report.markdown(runs, report.kept_findings(md.read_text() if md.exists()
                                                             else None)))
    for r in rows:
        print(f"{r['endpoint']:>14}: {r['rps']:7.1f}/s p50 {r['p50_ms']:g} ms "
              f"p99 {r['p99_ms']:g} ms errors {r['errors']}")
    print(f"targets: {run['targets']}; load average {run['load_average']}; wrote {path}")
    return 0


def _seed_if_empty(url: str) -> None:
    db = Database(url)
    try:
        with db.read_session() as s:
            empty = not s.scalar(select(func.count()).select_from(ProblemRow))
    except Exception:  # noqa: BLE001 - not migrated yet: the seeder migrates it
        empty = True
    finally:
        db.dispose()
    if empty:
        print(f"seeding {url} (10,000 problems, 1,000,000 measurements)", file=sys.stderr)
        seed_database(url, problems=10_000, measurements=1_000_000)


def _cancel_active(url: str) -> int:
    """Cancel the jobs an earlier run left queued or running (and their outstanding
    candidates): each run starts from the same queue, empty, under the queue's limit."""
    db = Database(url)
    try:
        with db.session() as s:
            ids = list(s.scalars(select(JobRow.id).where(JobRow.status.in_(ACTIVE_JOB))))
            for i in range(0, len(ids), 1000):
                chunk = ids[i:i + 1000]
                s.execute(update(CandidateRow).where(
                    CandidateRow.job_id.in_(chunk), CandidateRow.status.in_(OUTSTANDING))
                    .values(status=CandidateStatus.CANCELLED.value,
                            failure_reason="cancelled before a load run"))
                s.execute(delete(PlanMarkRow).where(PlanMarkRow.job_id.in_(chunk)))
                s.execute(update(JobRow).where(JobRow.id.in_(chunk)).values(
                    status=JobStatus.CANCELLED.value,
                    finished_at=datetime.now(UTC), error="cancelled before a load run"))
        return len(ids)
    finally:
        db.dispose()


def _serve(args: argparse.Namespace) -> subprocess.Popen[bytes]:
    parts = urlsplit(args.url)
    env = dict(os.environ, KS_DATABASE_URL=args.db, KS_PLANNING=args.planning)
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--host", parts.hostname or "127.0.0.1",
         "--port", str(parts.port or 80), "--processes", str(args.processes),
         "--no-access-log", "--worker", "no"], env=env, start_new_session=True)


def _wait_ready(url: str, server: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the API exited with {server.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the API at {url} was not ready after {timeout_s:.0f} s")


def _warm(url: str, queries: list[dict[str, str]], threads: int = 8) -> None:
    """Ask every question twice (so that each of two API processes has likely seen it): the
    run then measures a service in its steady state, not its first minute."""
    with httpx.Client(base_url=url, timeout=60.0) as http, \
            ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda q: http.get("/v1/best", params=q), queries * 2))


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def _locust(args: argparse.Namespace, shapes_file: Path, csv_prefix: Path) -> None:
    env = dict(os.environ, KS_LOAD_SHAPES=str(shapes_file), KS_LOAD_WORKERS=str(args.workers),
               KS_LOAD_CLIENT_RPS=str(args.client_rps), KS_LOAD_JOB_SHARE=str(args.job_share),
               KS_LOAD_MEASURE_S=str(args.measure_s),
               KS_LOAD_RUN=f"load-{int(time.time())}")
    subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
         "-u", str(args.users + args.workers), "-r", str(args.spawn_rate),
         "--run-time", f"{args.duration + int((args.users + args.workers) / args.spawn_rate)}s",
         "--reset-stats", "--stop-timeout", "10", "--host", args.url, "--csv", str(csv_prefix),
         "--exit-code-on-error", "0", "--loglevel", "WARNING"], env=env, check=True)


class _LoadSampler(threading.Thread):
    """The 1-minute load average, once a second."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[float] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(1.0):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def summary(self) -> dict[str, Any]:
        s = self.samples or [float("nan")]
        return {"mean": round(sum(s) / len(s), 2), "max": round(max(s), 2)}


if __name__ == "__main__":
    sys.exit(main())
