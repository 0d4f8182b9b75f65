"""The commands that talk to a running service over HTTP (``service.client``): ``submit``,
``status``, ``best``, ``jobs``, ``cancel``. Each prints tables, or JSON with ``--json``; a refusal
of the service is an error line naming the field, never a traceback."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from search.types import ProblemError
from service.cli import options as o
from service.cli import show
from service.cli.options import ProblemArgs, with_problem
from service.client import KernelSearchClient, KernelSearchConnectionError, KernelSearchError

FINISHED = ("done", "failed", "cancelled")
JobId = Annotated[int, typer.Argument(min=1, help="the job's id (submit prints it)")]
Wait = Annotated[bool, typer.Option(
    rich_help_panel=o.OUT_PANEL, help="follow the job with a progress bar until it ends")]


def client(url: str | None, token: str | None = None) -> KernelSearchClient:
    """A client of the service at ``url`` (default KS_URL) sending the user ``token`` (default
    KS_TOKEN)."""
    from workers.settings import WorkerSettings

    s = WorkerSettings()
    return KernelSearchClient(url or s.url, token=token or s.token)


def speaks(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The service's refusals as one line (the service names the field and the rule); an
    unreachable service with a hint. Exit status 2, as for a usage error."""

    @functools.wraps(fn)
    def command(*args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except KernelSearchConnectionError as exc:
            show.err.print(f"[red]error:[/red] {exc}\n(start one with `kernelsearch serve`, or "
                           "pass --url or KS_URL)", highlight=False)
            raise typer.Exit(2) from None
        except KernelSearchError as exc:
            show.err.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(2) from None

    return command


def _follow(c: KernelSearchClient, job: dict[str, Any], poll_s: float = 1.0) -> dict[str, Any]:
    title = f"job {job['id']}: {show._describe(job)}"
    with show.Follow(title, (job.get("progress") or {}).get("trials_budget")) as update:
        try:
            while job["status"] not in FINISHED:
                update(job)
                time.sleep(poll_s)
                job = c.get_job(job["id"])
            update(job)
        except KeyboardInterrupt:
            show.err.print(f"stopped following; job {job['id']} goes on "
                           f"(kernelsearch cancel {job['id']})")
            raise typer.Exit(130) from None
    return job


def _end(job: dict[str, Any], started: float, json_out: bool) -> None:
    if json_out:
        o.dump(job)
    else:
        show.result(job, time.monotonic() - started, "kernelsearch status "
                    f"{job['id']} shows it again")
    if job["status"] != "done":
        raise typer.Exit(1)


@with_problem
@speaks
def submit(
    args: ProblemArgs,
    trials: o.Trials = None, seconds: o.Seconds = None, backends: o.Backends = None,
    mode: o.ModeOpt = "agent", threshold: o.Threshold = None, allow_tf32: o.AllowTf32 = False,
    policy: o.PolicyItems = None, allow: o.Allow = None, gpu: o.Gpu = None, url: o.Url = None,
    token: o.Token = None,
    json_out: o.JsonOut = False, wait: Wait = False,
) -> None:
    """Submit a tuning job to a running service.

    Prints the job, or with --wait follows it to its decision. The service is
    kernelsearch serve's (or any deployment's). Example:
    kernelsearch submit --kind attention --batch 1 --heads 2 --kv-heads 1 --s-q 32 --s-kv 48
    --d 16 --dtype fp16 --wait
    """
    problem = args.parse()
    chosen = o.backends_of(args.kind, backends)
    try:
        args.kind.check_served(problem, chosen)
    except ProblemError as exc:
        raise args.error(exc) from None
    job_policy = o.policy_of(mode, threshold, allow_tf32, policy, allow)
    o.check_policy(args, problem, job_policy, chosen)
    c = client(url, token)
    started = time.monotonic()
    job = c.submit_job(problem.to_dict(), budget=o.budget_of(trials, seconds), backends=chosen,
                       gpu=gpu, policy=job_policy or None)
    if wait:
        show.err.print(f"job {job['id']} submitted")
        _end(_follow(c, job), started, json_out)
    elif json_out:
        o.dump(job)
    else:
        show.job(job)
        show.out.print(f"follow it: kernelsearch status {job['id']} --wait")


@speaks
def status(job_id: JobId, url: o.Url = None, token: o.Token = None,
           json_out: o.JsonOut = False,
           wait: Wait = False) -> None:
    """A job's state, progress, measurements and decision."""
    c = client(url, token)
    started = time.monotonic()
    job = c.get_job(job_id)
    if wait and job["status"] not in FINISHED:
        _end(_follow(c, job), started, json_out)
    elif json_out:
        o.dump(job)
    else:
        show.job(job)


@with_problem
@speaks
def best(args: ProblemArgs, gpu: o.Gpu = None, url: o.Url = None,
    token: o.Token = None,
         json_out: o.JsonOut = False,
         exact: Annotated[bool, typer.Option(
             "--exact", rich_help_panel=o.OUT_PANEL,
             help="the best kernel computing in the problem's input precision only (leaving "
                  "out those a policy allowed to compute lower, e.g. in fp8_e4m3)")] = False,
         ) -> None:
    """The best backend and configuration measured for a problem, with the precision it
    computes in and its measured error.

    The decision's pick where one is in force, else the fastest measurement so far; exit
    status 1 when the problem was never tuned (there). Example:
    kernelsearch best --m 4096 --n 4096 --k 4096 --dtype bf16
    """
    problem = args.parse()
    try:  # a problem no backend serves was never tuned: say why rather than "not found"
        args.kind.check_served(problem, args.kind.backends)
    except ProblemError as exc:
        raise args.error(exc) from None
    query = {"kind": args.kind.name, **problem.to_dict()}
    found = client(url, token).best(**query, gpu=gpu, exact="true" if exact else None)
    if found is None:
        where = f" on {gpu}" if gpu else ""
        what = " in its input precision" if exact else ""
        show.err.print(f"{problem.describe()} was never tuned{what}{where}: submit a job "
                       "first")
        raise typer.Exit(1)
    if json_out:
        o.dump(found)
    else:
        show.best(found)


@speaks
def jobs(limit: Annotated[int, typer.Option(min=1, max=500, help="how many, newest first")] = 20,
         offset: Annotated[int, typer.Option(min=0, help="skip this many")] = 0,
         url: o.Url = None, token: o.Token = None, json_out: o.JsonOut = False) -> None:
    """The service's jobs, newest first."""
    page = client(url, token).list_jobs(limit=limit, offset=offset)
    if json_out:
        o.dump(page)
    else:
        show.jobs(page)


@speaks
def cancel(job_id: JobId, url: o.Url = None, token: o.Token = None,
           json_out: o.JsonOut = False) -> None:
    """Cancel a queued or running job (what it measured stays)."""
    job = client(url, token).cancel_job(job_id)
    if json_out:
        o.dump(job)
    else:
        show.out.print(f"job {job['id']} {job['status']}")
