"""``kernelsearch``: tune a GEMM or an attention locally, serve the API, run a worker, query
results.

Also reachable as ``python3 -m service.cli``. Commands that run kernels (``tune``, ``worker``)
import the worker side lazily, so ``serve`` and the query commands never import torch.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Autotuning kernel search: library kernels vs generated Triton kernels "
                       "(GEMM, attention).")
console = Console(stderr=True)

Dtype = Annotated[str, typer.Option(
    help="dtype of A and B: bf16, fp16, fp32, fp8_e4m3 (fp8: per-tensor scales, bf16 output, "
         "A row-major and B column-major; served by the library kernels only)")]
LayoutB = Annotated[str | None, typer.Option(
    help="row or col (default: col for fp8_e4m3, which needs it; else row)")]
Mode = Literal["agent", "force", "full"]
Kind = Literal["gemm", "attention"]
#: GEMM's ``tune`` default leaves the CUTLASS search out (it needs a declared catalogue and
#: nvcc); other kinds default to every backend of the kind.
_GEMM_BACKENDS = "cublas,triton"


def _problem(m: int, n: int, k: int, dtype: str, batch: int, layout_a: str,
             layout_b: str | None) -> dict[str, Any]:
    if layout_b is None:
        layout_b = "col" if dtype == "fp8_e4m3" else "row"
    return {"kind": "gemm", "m": m, "n": n, "k": k, "dtype": dtype, "batch": batch,
            "layout_a": layout_a, "layout_b": layout_b}


def _attention_problem(batch: int, heads: int, kv_heads: int | None, s_q: int, s_kv: int,
                       d: int, causal: bool, dtype: str) -> dict[str, Any]:
    return {"kind": "attention", "batch": batch, "heads": heads, "kv_heads": kv_heads,
            "s_q": s_q, "s_kv": s_kv, "d": d, "causal": causal, "dtype": dtype}


def _gpu_present() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


@app.command()
def tune(
    m: int = 4096, n: int = 4096, k: int = 4096, dtype: Dtype = "bf16", batch: int = 1,
    layout_a: str = "row", layout_b: LayoutB = None,
    kind: Annotated[Kind, typer.Option(
        help="gemm (--m --n --k --layout-a --layout-b) or attention (--heads --kv-heads --s-q "
             "--s-kv --d --causal; --batch and --dtype serve both)")] = "gemm",
    heads: Annotated[int, typer.Option(help="attention: query heads")] = 32,
    kv_heads: Annotated[int | None, typer.Option(
        help="attention: key/value heads (fewer: GQA; default: --heads)")] = None,
    s_q: Annotated[int, typer.Option(help="attention: query length")] = 4096,
    s_kv: Annotated[int, typer.Option(help="attention: key/value length")] = 4096,
    d: Annotated[int, typer.Option(help="attention: head dimension")] = 128,
    causal: Annotated[bool, typer.Option(
        help="attention: causal mask (aligned bottom-right when s_q != s_kv)")] = False,
    trials: Annotated[int, typer.Option(help="custom (Triton) configurations to measure")] = 64,
    seconds: Annotated[float | None, typer.Option(help="stop after this long")] = None,
    backends: Annotated[str | None, typer.Option(help=(
        f"comma-separated backends (default: {_GEMM_BACKENDS} for gemm, every backend of the "
        "kind otherwise)"))] = None,
    database_url: Annotated[str | None, typer.Option(
        "--db", help="SQLAlchemy URL (default: KS_DATABASE_URL or ./kernelsearch.db)")] = None,
    interpret: Annotated[bool | None, typer.Option(
        help="Triton interpreter on the CPU (default: when there is no GPU)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the result here")] = None,
    mode: Annotated[Mode, typer.Option(
        help="agent: stop when the library is near the roofline; force: always search custom "
             "kernels; full: search the whole budget, no early stops")] = "agent",
    threshold: Annotated[float, typer.Option(
        min=0.01, max=1.0, help="library efficiency that counts as sufficient")] = 0.9,
    allow_tf32: Annotated[bool, typer.Option(help="fp32 inputs may run in tf32")] = False,
) -> None:
    """Tune one GEMM or attention on this machine (embedded service, SQLite, local worker):
    calibrate the GPU once, measure the library, search custom kernels where they can pay,
    decide."""
    from search import kinds
    from search.types import ProblemError, parse_problem
    from service.local import run_tuning
    from service.settings import ServiceSettings

    settings = ServiceSettings(**({"database_url": database_url} if database_url else {}))
    if kind == "attention":
        problem = _attention_problem(batch, heads, kv_heads, s_q, s_kv, d, causal, dtype)
    else:
        problem = _problem(m, n, k, dtype, batch, layout_a, layout_b)
    chosen = (backends or (_GEMM_BACKENDS if kind == "gemm" else
                           ",".join(kinds.get(kind).backends))).split(",")
    try:
        parsed = parse_problem(problem)
        kinds.get(kind).check_served(parsed, chosen)  # fail before starting anything
    except ProblemError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"--{exc.field.replace('_', '-')}"
                                 ) from None
    budget: dict[str, Any] = {"max_trials": trials}
    if seconds is not None:
        budget["max_seconds"] = seconds
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TextColumn("{task.fields[best]}"),
                        TimeElapsedColumn(), console=console)
    with progress:
        task = progress.add_task(f"tuning {parsed.describe()}", total=trials, best="")

        def show(job: dict[str, Any]) -> None:
            p = job.get("progress") or {}
            best = job.get("best") or {}
            text = (f"best {best['backend']} {best['median_us']:.1f} µs" if best else "")
            text = f"[{job.get('stage') or 'queued'}] {text}"
            progress.update(task, completed=p.get("trials_done", 0),
                            total=p.get("trials_budget") or trials, best=text)

        policy = {"threshold": threshold, "allow_tf32": allow_tf32,
                  "force_custom": mode == "force", "full_search": mode == "full"}
        result = run_tuning(problem, budget, database_url=settings.database_url,
                            backends=chosen, interpret=interpret,
                            on_progress=show, settings=settings, policy=policy)
    _print_result(result)
    if json_out is not None:
        json_out.write_text(json.dumps({"job": result.job, "best": result.best,
                                        "wall_s": result.wall_s}, indent=2))
    if result.job["status"] != "done":
        raise typer.Exit(1)


def _print_result(result: Any) -> None:
    job = result.job
    lib, custom, best = job.get("library_best"), job.get("custom_best"), job.get("best")
    table = Table(title=f"{job.get('problem_key', '')} on {result.gpu_model}")
    for col in ("", "backend", "median µs", "p20–p80 µs", "TFLOP/s"):
        table.add_column(col)
    for label, row in (("library best", lib), ("best Triton", custom), ("winner", best)):
        if row:
            table.add_row(label, row["backend"], f"{row['median_us']:.2f}",
                          f"{row['p20_us']:.2f}–{row['p80_us']:.2f}", f"{row['tflops']:.1f}")
        else:
            table.add_row(label, "—", "—", "—", "—")
    out = Console()
    out.print(table)
    decision = job.get("decision")
    if decision:
        spend = decision.get("spend") or {}
        gpu_s = ", ".join(f"{k} {v.get('trials', 0)} trials {v.get('gpu_s', 0):.1f} s"
                          for k, v in spend.items())
        out.print(f"[bold]verdict: {decision['verdict']}[/bold] (chose the {decision['chosen']}"
                  f" kernel, {decision.get('speedup') or 1:.3f}x over the library; "
                  f"{'verified interleaved' if decision.get('verified') else 'not re-measured'})")
        out.print(f"why: {decision['rationale']}")
        out.print(f"spent: {gpu_s}")
        vs = decision.get("speedup_vs_cublas")  # over the kind's baseline (cuBLAS for GEMM)
        baseline = decision.get("baseline") or "cublas"
        pick = decision.get(decision.get("chosen") or "library") or {}
        if vs is not None and pick.get("backend") != baseline:
            label = "cuBLAS" if baseline == "cublas" else baseline
            out.print(f"speed-up over {label}: {vs:.3f}x ({pick.get('backend')})")
    elif lib and best:
        out.print(f"speed-up over cuBLAS: {lib['median_us'] / best['median_us']:.3f}x")
    progress = job.get("progress") or {}
    out.print(f"job {job['id']} {job['status']}: {progress.get('trials_done')} trials in "
              f"{result.wall_s:.1f} s; stored in {result.database_url}")
    chosen = (decision or {}).get("config") if decision else (best or {}).get("config")
    if decision or best:
        out.print(f"chosen config: {json.dumps(chosen)}")
    if job.get("error"):
        out.print(f"[red]error: {job['error']}")


@app.command()
def serve(
    host: str = "127.0.0.1", port: int = 8000,
    worker: Annotated[str, typer.Option(
        help="auto: start a local worker when a GPU is present; yes; no")] = "auto",
) -> None:
    """Start the API (migrations first) and, where a GPU is present, a local worker."""
    import uvicorn

    from service.app import create_app
    from service.settings import get_settings

    settings = get_settings()
    child: subprocess.Popen[bytes] | None = None
    if worker == "yes" or (worker == "auto" and _gpu_present()):
        env = dict(os.environ, KS_URL=f"http://{host}:{port}")
        child = subprocess.Popen([sys.executable, "-m", "service.cli", "worker",
                                  "--url", f"http://{host}:{port}", "--wait-for-service",
                                  "--exit-with-parent"], env=env)
        console.print(f"local worker started (pid {child.pid})")
    try:
        uvicorn.run(create_app(settings), host=host, port=port)
    finally:
        if child is not None:
            child.terminate()
            child.wait(timeout=30)


@app.command("worker")
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
    from workers.isolation import IsolatedRunner
    from workers.loop import WorkerLoop
    from workers.plugins import import_plugins
    from workers.settings import WorkerSettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    s = WorkerSettings()
    url = url or s.url
    client = KernelSearchClient(url, token=token or s.worker_token)
    if wait_for_service:
        _wait_for(url)
    plugins = import_plugins(s.plugins)  # before the device: their backends are offered too
    device = detect_device(interpret if interpret is not None else s.interpret)
    console.print(f"worker on {device.gpu_model} ({device.mode}) → {url}")
    with IsolatedRunner(interpret=device.mode != "cuda", timeout_s=s.candidate_timeout_s,
                        plugins=plugins) as runner:
        loop = WorkerLoop(client, runner, device, name=s.worker_name,
                          batch=batch or s.batch, poll_s=s.poll_s,
                          catalogues=catalogues(device))
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


def _wait_for(url: str, timeout_s: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/docs", timeout=2.0)
            return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise typer.BadParameter(f"no service answered at {url}")


def _client(url: str | None) -> Any:
    from service.client import KernelSearchClient
    from workers.settings import WorkerSettings

    s = WorkerSettings()
    return KernelSearchClient(url or s.url, token=s.worker_token)


@app.command()
def submit(m: int, n: int, k: int, dtype: Dtype = "bf16", batch: int = 1,
           layout_a: str = "row", layout_b: LayoutB = None, trials: int = 64,
           gpu: str | None = None, url: str | None = None) -> None:
    """Submit a tuning job to a running service."""
    job = _client(url).submit_job(_problem(m, n, k, dtype, batch, layout_a, layout_b),
                                  budget={"max_trials": trials}, gpu=gpu)
    print(json.dumps(job, indent=2))


@app.command()
def status(job_id: int, url: str | None = None) -> None:
    """Show a job's status, progress and best so far."""
    print(json.dumps(_client(url).get_job(job_id), indent=2))


@app.command()
def best(m: int, n: int, k: int, dtype: Dtype = "bf16", batch: int = 1,
         layout_a: str = "row", layout_b: LayoutB = None, gpu: str | None = None,
         url: str | None = None) -> None:
    """The best measured backend and configuration for a shape."""
    query = _problem(m, n, k, dtype, batch, layout_a, layout_b)
    if gpu:
        query["gpu"] = gpu
    found = _client(url).best(**query)
    if found is None:
        console.print("never tuned: submit a job first")
        raise typer.Exit(1)
    print(json.dumps(found, indent=2))


def main() -> None:
    from service.client import KernelSearchError

    try:
        app()
    except KernelSearchError as exc:
        # The service refused the request (bad input, unknown id) or cannot be reached: its
        # message names the field and the rule; a traceback would only hide it.
        console.print(f"[red]error:[/red] {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
