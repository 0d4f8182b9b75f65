"""The commands that run here: ``tune`` (the embedded service, a SQLite file and a local
worker, for one job), ``serve`` (the API, and a local worker where a GPU is present) and
``worker``. They import the worker side lazily, so ``serve`` never imports torch.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated

import typer

from search import kinds
from search.types import ProblemError
from service.cli import options as o
from service.cli import show
from service.cli.options import ProblemArgs, with_problem

console = show.err
HERE_PANEL = "This machine"


@with_problem
def tune(
    args: ProblemArgs,
    trials: o.Trials = None, seconds: o.Seconds = None, backends: o.Backends = None,
    mode: o.ModeOpt = "agent", threshold: o.Threshold = None, allow_tf32: o.AllowTf32 = False,
    policy: o.PolicyItems = None, allow: o.Allow = None,
    database_url: Annotated[str | None, typer.Option(
        "--db", rich_help_panel=HERE_PANEL,
        help="SQLAlchemy URL (default: KS_DATABASE_URL or ./kernelsearch.db)")] = None,
    interpret: Annotated[bool | None, typer.Option(
        rich_help_panel=HERE_PANEL,
        help="Triton interpreter on the CPU (default: when there is no GPU)")] = None,
    json_out: o.JsonOut = False,
    out: Annotated[Path | None, typer.Option(
        rich_help_panel=o.OUT_PANEL, help="also write the result as JSON to this file")] = None,
) -> None:
    """Tune one problem on this machine, start to decision.

    The embedded service (a SQLite file) and a local worker: calibrate the GPU once, measure
    the library, search custom kernels where they can pay, decide. Without a GPU, Triton runs
    in its interpreter and the library on the CPU. Example:
    kernelsearch tune --m 64 --n 48 --k 80 --dtype fp16 --trials 4
    """
    from service.local import run_tuning
    from service.settings import ServiceSettings

    problem = args.parse()
    chosen = o.backends_of(args.kind, backends)
    try:
        args.kind.check_served(problem, chosen)  # fail before starting anything
    except ProblemError as exc:
        raise args.error(exc) from None
    job_policy = o.policy_of(mode, threshold, allow_tf32, policy, allow)
    o.check_policy(args, problem, job_policy, chosen)
    settings = ServiceSettings(**({"database_url": database_url} if database_url else {}))
    with show.Follow(f"tuning {problem.describe()}", trials) as on_progress:
        result = run_tuning(problem.to_dict(), o.budget_of(trials, seconds),
                            database_url=settings.database_url, backends=chosen,
                            interpret=interpret, on_progress=on_progress, settings=settings,
                            policy=job_policy)
    answer = {"job": result.job, "best": result.best, "wall_s": result.wall_s,
              "gpu": result.gpu_model, "database_url": result.database_url}
    if out is not None:
        out.write_text(json.dumps(answer, indent=2, default=str))
    if json_out:
        o.dump(answer)
    else:
        show.result(result.job, result.wall_s, f"stored in {result.database_url}")
    if result.job["status"] != "done":
        raise typer.Exit(1)


def _gpu_present() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout



def serve(
    host: str = "127.0.0.1", port: int = 8000,
    worker: Annotated[str, typer.Option(
        help="auto: start a local worker when a GPU is present; yes; no")] = "auto",
    processes: Annotated[int, typer.Option(
        "--processes", "--workers", min=1, max=64,
        help="API processes sharing the port (uvicorn's workers); the migrations run once, "
             "before they start")] = 1,
    access_log: Annotated[bool, typer.Option(help="log a line per request")] = True,
    planner_nice: Annotated[int, typer.Option(
        min=0, max=19, help="KS_PLANNING=background: the planner process's added nice value")
                            ] = 10,
    planner_idle: Annotated[bool, typer.Option(
        help="KS_PLANNING=background: run the planner in the idle scheduling class (Linux "
             "SCHED_IDLE; see `kernelsearch planner --idle`)")] = True,
    planner_async_commit: Annotated[bool, typer.Option(
        help="KS_PLANNING=background: the planner's commits do not wait for the disk (see "
             "`kernelsearch planner --async-commit`)")] = True,
) -> None:
    """Start the API (migrations first) and, where a GPU is present, a local worker."""
    import uvicorn

    from service.app import create_app
    from service.settings import get_settings

    settings = get_settings()
    background = settings.planning == "background"
    if (processes > 1 or background) and settings.migrate_on_startup:
        from db.migrate import upgrade

        upgrade(settings.database_url, studies=True)  # once, not a race between the processes
        os.environ["KS_MIGRATE_ON_STARTUP"] = "false"  # the processes read their settings anew
    planner: subprocess.Popen[bytes] | None = None
    if background:  # requests only mark jobs: a planner process plans them, at a lower priority
        planner = subprocess.Popen([sys.executable, "-m", "service.cli", "planner",
                                    "--nice", str(planner_nice),
                                    "--idle" if planner_idle else "--no-idle",
                                    "--async-commit" if planner_async_commit
                                    else "--no-async-commit", "--exit-with-parent"])
        console.print(f"planner started (pid {planner.pid}, nice {planner_nice}"
                      f"{', idle class' if planner_idle else ''})")
    child: subprocess.Popen[bytes] | None = None
    if worker == "yes" or (worker == "auto" and _gpu_present()):
        env = dict(os.environ, KS_URL=f"http://{host}:{port}")
        child = subprocess.Popen([sys.executable, "-m", "service.cli", "worker",
                                  "--url", f"http://{host}:{port}", "--wait-for-service",
                                  "--exit-with-parent"], env=env)
        console.print(f"local worker started (pid {child.pid})")
    try:
        if processes > 1:  # uvicorn imports the factory in each process
            uvicorn.run("service.app:create_app", factory=True, host=host, port=port,
                        workers=processes, access_log=access_log)
        else:
            uvicorn.run(create_app(settings), host=host, port=port, access_log=access_log)
    finally:
        for proc in (child, planner):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)


def planner_cmd(
    batch: Annotated[int, typer.Option(min=1, max=1000, help="jobs claimed at a time")] = 8,
    poll_s: Annotated[float, typer.Option(min=0.001, max=60.0,
                                          help="seconds between looks when no job is marked")
                      ] = 0.05,
    nice: Annotated[int, typer.Option(min=0, max=19, help="added to the process's nice value: "
                                      "on a shared host requests answer first")] = 0,
    idle: Annotated[bool, typer.Option(
        help="run in the kernel's idle scheduling class (Linux SCHED_IDLE): the planner gets "
             "a core only when nothing else wants it, so on a busy host a request waking up "
             "never waits behind it; where there is no such class, --nice alone")] = False,
    async_commit: Annotated[bool, typer.Option(
        help="on Postgres, commit without waiting for the write-ahead log to reach the disk "
             "(synchronous_commit=off, this process's connections only): the planner's many "
             "small commits stop queueing on the disk's flushes beside the requests'. A "
             "database crash may lose its last fraction of a second of planning, which the "
             "next planner does again (results and marks are the requests', flushed)")
                            ] = False,
    drain: Annotated[bool, typer.Option(help="plan what is marked now, then exit")] = False,
    exit_with_parent: Annotated[bool, typer.Option(
        help="stop when the process that started this one is gone (used by serve)")] = False,
) -> None:
    """Plan the jobs the API marked (KS_PLANNING=background): Optuna's proposals and tells,
    verifications and decisions, outside the requests. Several planners may share a database."""
    from db.engine import Database, commit_without_flush_wait
    from service.flow import Flow
    from service.planner import Planner
    from service.settings import get_settings
    from service.tuning import TunerPool, optuna_tuner

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    lower_priority(nice, idle=idle)
    if async_commit:
        commit_without_flush_wait()
    settings = get_settings()
    kinds.load_plugins(settings.plugin_modules)
    database = Database(settings.database_url)
    flow = Flow(database, settings, TunerPool(database.url, optuna_tuner))
    planner = Planner(flow, batch=batch)
    stop = threading.Event()
    if exit_with_parent:
        threading.Thread(target=_watch_parent, args=(os.getppid(), stop), daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        if drain:
            planner.drain()
        else:
            console.print("planner started: planning the jobs the API marks")
            planner.run(stop, poll_s=poll_s)
    except KeyboardInterrupt:
        pass
    finally:
        flow.close()
    console.print(f"planner done: {planner.planned} jobs planned")


def lower_priority(nice: int, *, idle: bool) -> bool:
    """Lower this process's CPU priority: ``nice`` added to its nice value, and with ``idle``
    the idle scheduling class (``SCHED_IDLE``, Linux), in which it runs only on a core nothing
    else wants. Threads started afterwards inherit both. Returns whether the idle class was
    set (False without ``idle``, or where the platform has no such class)."""
    if nice:
        os.nice(nice)
    if not idle or not hasattr(os, "sched_setscheduler") or not hasattr(os, "SCHED_IDLE"):
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError as exc:  # a sandbox that forbids it: --nice still holds
        logging.getLogger("kernelsearch.planner").warning("idle scheduling class refused: %s",
                                                          exc)
        return False
    return True


def worker_cmd(
    url: Annotated[str | None, typer.Option(help="service URL (default KS_URL)")] = None,
    token: Annotated[str | None, typer.Option(help="worker token (default KS_WORKER_TOKEN)")
                     ] = None,
    interpret: Annotated[bool | None, typer.Option(
        help="Triton interpreter on the CPU (default: when there is no GPU)")] = None,
    batch: Annotated[int | None, typer.Option(help="candidates per lease")] = None,
    idle_exit: Annotated[float | None, typer.Option(help="exit after this many idle seconds")
                         ] = None,
    wait_for_service: bool = False,
    exit_with_parent: Annotated[bool, typer.Option(
        help="stop when the process that started this one is gone (used by serve)")] = False,
) -> None:
    """Run a worker that leases candidates from the service over HTTP."""
    from service.client import KernelSearchClient
    from workers.device import catalogues, detect_device
    from workers.identity import SecretFile
    from workers.isolation import IsolatedRunner
    from workers.loop import WorkerLoop
    from workers.plugins import import_plugins
    from workers.settings import WorkerSettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per poll says nothing
    s = WorkerSettings()
    url = url or s.url
    client = KernelSearchClient(url, worker_token=token or s.worker_token,
                                max_backoff_s=s.max_backoff_s)
    if wait_for_service:
        _wait_for(url)
    plugins = import_plugins(s.plugins)  # before the device: their backends are offered too
    device = detect_device(interpret if interpret is not None else s.interpret)
    console.print(f"worker on {device.gpu_model} ({device.mode}) → {url}")
    with IsolatedRunner(interpret=device.mode != "cuda", timeout_s=s.candidate_timeout_s,
                        plugins=plugins) as runner:
        loop = WorkerLoop(client, runner, device, name=s.worker_name,
                          batch=batch or s.batch, poll_s=s.poll_s,
                          catalogues=catalogues(device), max_backoff_s=s.max_backoff_s,
                          secret_file=SecretFile(s.state_dir, url,
                                                 s.worker_name or socket.gethostname()))
        stop = threading.Event()
        if exit_with_parent:
            # uvicorn re-raises the signal that stopped it, so `serve` may die without running
            # its cleanup; the worker notices its parent is gone and leaves on its own.
            parent = os.getppid()
            threading.Thread(target=_watch_parent, args=(parent, stop), daemon=True).start()
        try:
            loop.run(stop, idle_exit_s=idle_exit)
        except KeyboardInterrupt:
            pass
    console.print(f"worker done: {loop.stats}")


def _watch_parent(parent: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        if os.getppid() != parent:
            console.print("parent process gone: worker stopping")
            stop.set()


def _wait_for(url: str, timeout_s: float = 300.0) -> None:
    """Wait until the service answers and reaches its database (``/readyz``)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=5.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise typer.BadParameter(f"no service ready at {url} after {timeout_s:.0f} s")


def migrate(
    database_url: Annotated[str | None, typer.Option(
        "--db", help="SQLAlchemy URL (default: KS_DATABASE_URL)")] = None,
) -> None:
    """Bring the database to the latest schema (``alembic upgrade head``) and exit: the
    one-shot step a deployment runs before its API processes (which then start with
    KS_MIGRATE_ON_STARTUP=false)."""
    from db.migrate import current, upgrade
    from service.settings import get_settings

    url = database_url or get_settings().database_url
    upgrade(url, studies=True)  # Optuna's tables too: API processes then race for nothing
    console.print(f"database at revision {current(url)}")
