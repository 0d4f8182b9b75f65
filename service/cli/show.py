"""What the commands print: tables (``rich``) of jobs, results and decisions.

Backends are named for what runs them on the job's device (``kind.label``: on the CPU, GEMM's
``cublas`` is torch's CPU matmul); rates keep their significant digits (a CPU's 0.0065 TFLOP/s
is not 0.0); the share of the roofline comes from the decision's ``attainable_us`` through
``search.roofline.efficiency``, the rule the decision loop itself uses, and reads "no roofline"
where the decision had none.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from search import kinds
from search.kinds.base import ProblemKind
from search.roofline import efficiency
from search.types import INTERPRETER_GPU, Problem, ProblemError, parse_problem

#: Messages and progress (stderr), and what the commands print (stdout).
err = Console(stderr=True)
out = Console()

CPU_NOTE = ("on the CPU: Triton in its interpreter, the library on torch's CPU kernels; no GPU "
            "numbers and no roofline")


def rate(x: float | None) -> str:
    """A rate with its digits: whole from 100 up, else three significant ones."""
    if x is None:
        return "—"
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def us(x: float | None) -> str:
    """A time in microseconds, to a hundredth where that still means something."""
    if x is None:
        return "—"
    return f"{x:.0f}" if x >= 1000 else f"{x:.1f}" if x >= 100 else f"{x:.2f}"


def problem_of(answer: dict[str, Any]) -> Problem | None:
    """The problem of a job (its ``problem``) or of a best answer (its ``problem_key``)."""
    try:
        if answer.get("problem"):
            return parse_problem(answer["problem"])
        if answer.get("problem_key"):
            return kinds.problem_from_key(str(answer["problem_key"]))
    except (ProblemError, TypeError, ValueError):
        pass  # a kind this CLI does not know (a plug-in it has not loaded)
    return None


def _kind(problem: Problem | None) -> ProblemKind | None:
    try:
        return kinds.get(problem.kind) if problem is not None else None
    except ProblemError:
        return None


def backend(problem: Problem | None, name: str | None, gpu: str | None) -> str:
    """``name`` as it runs on ``gpu``: ``torch CPU matmul (cublas)`` where they differ."""
    if not name:
        return "—"
    kind = _kind(problem)
    label = kind.label(name, gpu or "") if kind is not None else name
    return escape(name if label == name else f"{label} ({name})")


def precision(row: dict[str, Any]) -> tuple[str, str]:
    """What a kernel computes in and its measured relative error, as table cells."""
    err = row.get("rel_error")
    return escape(str(row.get("precision") or "—")), "—" if err is None else f"{err:.2g}"


def _roofline_share(decision: dict[str, Any] | None, us: float) -> str:
    if not decision:
        return "—"
    attainable = decision.get("attainable_us")
    if not attainable:
        return "no roofline"
    eff = efficiency(float(attainable), us)
    return "under its floor" if eff is None else f"{eff:.0%}"


def _rows(job: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    return [("library best", job.get("library_best")), ("best custom", job.get("custom_best")),
            ("served" if job.get("decision") else "best so far", job.get("best"))]


def measurements(job: dict[str, Any], title: str | None = None) -> Table:
    """The library's best, the custom best and the pick, with rates and roofline share."""
    problem = problem_of(job)
    gpu = job.get("gpu")
    table = Table(title=escape(title) if title else None, title_justify="left")
    for col in ("", "backend", "median µs", "p20–p80 µs", "TFLOP/s", "GB/s", "of roofline",
                "precision", "rel. error"):
        table.add_column(col, justify="right" if "µs" in col or "/" in col else "left",
                         no_wrap=col != "backend")
    for label, row in _rows(job):
        if not row:
            table.add_row(label, "—", "—", "—", "—", "—", "—", "—", "—")
            continue
        median = float(row["median_us"])
        gbs = problem.min_bytes / (median * 1e-6) / 1e9 if problem is not None else None
        table.add_row(label, backend(problem, row["backend"], gpu), us(median),
                      f"{us(row['p20_us'])}–{us(row['p80_us'])}", rate(row.get("tflops")),
                      rate(gbs), _roofline_share(job.get("decision"), median),
                      *precision(row))
    if gpu == INTERPRETER_GPU:
        table.caption = CPU_NOTE
    return table


def decision_lines(decision: dict[str, Any], problem: Problem | None) -> list[str]:
    gpu = decision.get("gpu")
    spend = decision.get("spend") or {}
    spent = ", ".join(
        f"{k} {v.get('trials', 0)} trial{'' if v.get('trials') == 1 else 's'} "
        f"{v.get('gpu_s', 0):.1f} s" for k, v in spend.items())
    speedup = decision.get("speedup") or 1.0
    lines = [f"[bold]verdict: {decision['verdict']}[/bold] (the {decision['chosen']} kernel, "
             f"{speedup:.3f}x over the library; "
             f"{'verified interleaved' if decision.get('verified') else 'not re-measured'})",
             f"why: {escape(decision['rationale'])}", f"spent: {spent}"]
    if decision.get("precision"):
        err = decision.get("rel_error")
        lines.insert(1, f"served: {backend(problem, decision.get('backend'), gpu)} computing "
                        f"in {escape(decision['precision'])}, measured relative error "
                        f"{'unknown' if err is None else f'{err:.3g}'}")
    vs, baseline = decision.get("speedup_vs_cublas"), decision.get("baseline")
    pick = decision.get(decision.get("chosen") or "library") or {}
    if vs is not None and baseline and pick.get("backend") != baseline:
        kind = _kind(problem)
        name = (kind.label(baseline, gpu or "") if kind is not None else baseline)
        if kind is not None and name == baseline:
            name = kind.roles.baseline_label
        lines.append(f"speed-up over {name}: {vs:.3f}x "
                     f"({backend(problem, pick.get('backend'), gpu)})")
    if decision.get("config") is not None:
        lines.append(f"config: {escape(json.dumps(decision['config']))}")
    return lines


def _describe(job: dict[str, Any]) -> str:
    problem = problem_of(job)
    return problem.describe() if problem is not None else str(job.get("problem_key", ""))


def job(job: dict[str, Any]) -> None:
    """A job: its state, progress, measurements and decision."""
    p = job.get("progress") or {}
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    budget = job.get("budget") or {}
    limit = " ".join(x for x in (
        f"{budget['max_trials']} trials" if budget.get("max_trials") else "",
        f"{budget['max_seconds']:g} s" if budget.get("max_seconds") else "") if x)
    for key, value in (
            ("job", f"{job['id']} {job['status']}" + (f" ({job['stage']})" if job.get("stage")
                                                      else "")),
            ("problem", f"{_describe(job)}  [{job.get('problem_key', '')}]"),
            ("gpu", job.get("gpu") or f"not bound yet (target {job.get('target_gpu') or 'any'})"),
            ("backends", ", ".join(job.get("backends") or [])),
            ("progress", f"{p.get('trials_done', 0)} of {p.get('trials_budget') or '—'} custom "
                         f"trials, {p.get('outstanding', 0)} outstanding"
                         + (f", {p['elapsed_s']:.1f} s" if p.get("elapsed_s") else "")),
            ("budget", limit or "the service's default"),
            ("waiting", job.get("waiting")), ("error", job.get("error"))):
        if value:
            head.add_row(key, escape(str(value)))
    out.print(head)
    if any(row for _, row in _rows(job)):
        out.print(measurements(job))
    else:
        out.print("nothing measured yet")
    if job.get("decision"):
        for line in decision_lines(job["decision"], problem_of(job)):
            out.print(line)


def result(job: dict[str, Any], wall_s: float, where: str) -> None:
    """What ``tune`` and ``submit --wait`` print when the job has ended."""
    gpu = job.get("gpu")
    out.print(measurements(job, title=f"{_describe(job)} on {gpu}"))
    problem = problem_of(job)
    if job.get("decision"):
        for line in decision_lines(job["decision"], problem):
            out.print(line)
    elif job.get("best"):
        out.print(f"config: {escape(json.dumps(job['best'].get('config')))}")
    p = job.get("progress") or {}
    out.print(f"job {job['id']} {job['status']}: {p.get('trials_done')} custom trials in "
              f"{wall_s:.1f} s; {where}")
    if job.get("error"):
        out.print(f"[red]error:[/red] {escape(job['error'])}")


def best(found: dict[str, Any]) -> None:
    """``GET /v1/best``'s answer."""
    problem = problem_of(found)
    gpu = found.get("gpu")
    decision = found.get("decision")
    table = Table(title=escape(f"{found.get('problem_key')} on {gpu}"), title_justify="left")
    for col in ("", "backend", "median µs", "p20–p80 µs", "TFLOP/s", "of roofline",
                "precision", "rel. error"):
        table.add_column(col, justify="right" if "µs" in col or "/" in col else "left")
    for label, row in (("best", found), ("library", found.get("library"))):
        if row:
            median = float(row["median_us"])
            table.add_row(label, backend(problem, row["backend"], gpu), us(median),
                          f"{us(row['p20_us'])}–{us(row['p80_us'])}", rate(row.get("tflops")),
                          _roofline_share(decision, median), *precision(row))
    if gpu == INTERPRETER_GPU:
        table.caption = CPU_NOTE
    out.print(table)
    if found.get("speedup"):
        out.print(f"speed-up over the library: {found['speedup']:.3f}x")
    out.print(f"config: {escape(json.dumps(found.get('config')))}")
    out.print(f"measured {found.get('measured_at')}; problem {found.get('problem_id')}")
    if decision:
        out.print(f"[bold]verdict: {decision['verdict']}[/bold] (decision {decision['id']})")
        out.print(f"why: {escape(decision['rationale'])}")
    else:
        out.print("no decision yet: the fastest measurement so far")


def jobs(page: dict[str, Any]) -> None:
    table = Table(title=f"jobs {page['offset'] + 1}–{page['offset'] + len(page['items'])} of "
                        f"{page['total']}", title_justify="left")
    for col in ("id", "status", "problem", "gpu", "trials", "best", "median µs", "verdict"):
        table.add_column(col, justify="right" if col in ("id", "median µs") else "left")
    for j in page["items"]:
        p = j.get("progress") or {}
        b = j.get("best") or {}
        stage = j.get("stage")
        table.add_row(str(j["id"]), j["status"] + (f" ({stage})" if stage and stage != "decided"
                                                   else ""),
                      escape(_describe(j)), escape(j.get("gpu") or "—"),
                      f"{p.get('trials_done', 0)}/{p.get('trials_budget') or '—'}",
                      escape(b.get("backend") or "—"), us(b.get("median_us")),
                      (j.get("decision") or {}).get("verdict") or "—")
    out.print(table)


class Follow:
    """A progress bar over a job's custom trials until it ends (``on_progress`` target)."""

    def __init__(self, title: str, total: int | None) -> None:
        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TextColumn("{task.fields[best]}"),
                            TimeElapsedColumn(), console=err, transient=False)
        self.task = self.bar.add_task(title, total=total, best="")

    def __enter__(self) -> Callable[[dict[str, Any]], None]:
        self.bar.__enter__()
        return self.update

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def update(self, job: dict[str, Any]) -> None:
        p = job.get("progress") or {}
        b = job.get("best") or {}
        problem = problem_of(job)
        text = (f"best {backend(problem, b['backend'], job.get('gpu'))} "
                f"{b['median_us']:.1f} µs" if b else "")
        self.bar.update(self.task, completed=p.get("trials_done", 0),
                        total=p.get("trials_budget") or None,
                        best=f"[{job.get('stage') or job.get('status')}] {text}")
