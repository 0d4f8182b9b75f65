"""Time every dashboard page and data endpoint against a database, as a browser would ask.

    python -m scripts.dashboard.timings DB_URL --out docs/benchmarks [--name NAME] [--runs 20]

The app runs in its own process (uvicorn, one worker, as ``kernelsearch serve``) on a loopback
port; each URL is fetched twice to warm up, then ``--runs`` times one after the other. The table
gives the median, p90 and slowest wall time of each (request to last byte), the p90 against the
budget (300 ms), and the database's size; ``NAME.md`` and ``NAME.json`` go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy import func, select, text

from db.engine import Database
from db.models import DecisionRow, JobRow, MeasurementRow, ProblemRow, SummaryRow

BUDGET_MS = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def counts(url: str) -> dict[str, Any]:
    db = Database(url)
    try:
        with db.read_session() as s:
            out: dict[str, Any] = {
                name: int(s.scalar(select(func.count()).select_from(row)) or 0)
                for name, row in (("problems", ProblemRow), ("measurements", MeasurementRow),
                                  ("jobs", JobRow), ("decisions", DecisionRow),
                                  ("tuned_rows", SummaryRow))}
            if db.dialect == "postgresql":
                out["server"] = "postgres " + str(s.scalar(text("SHOW server_version")))
            else:
                out["server"] = "sqlite " + str(s.scalar(text("SELECT sqlite_version()")))
        return out
    finally:
        db.dispose()


def urls(base: str) -> list[tuple[str, str, str]]:
    """``(page, kind, path)``: each page's HTML and the data its scripts fetch, with the
    filters, sorts and pages a user would try, picked from what the database holds."""
    top = httpx.get(f"{base}/ui/api/overview?sort=trials&order=desc&per_page=10",
                    timeout=60).json()
    busiest = top["rows"][0]
    pid, gpu = busiest["problem_id"], quote(busiest["gpu_model"])
    last = top["pages"] * 10 // 50
    return [
        ("overview", "html", "/ui"),
        ("overview", "html", "/ui?sort=speedup&order=desc"),
        ("overview", "html", f"/ui?kind=gemm&gpu={gpu}&sort=roofline&order=asc"),
        ("overview", "html", "/ui?verdict=custom_wins&shape=4096&sort=gpu_s&order=desc"),
        ("overview", "html", f"/ui?sort=shape&order=asc&page={max(1, last)}"),
        ("overview", "data", "/ui/api/overview?sort=trials&order=desc"),
        ("overview", "data", "/ui/api/overview?kind=attention&verdict=undecided&page=2"),
        ("problem", "html", f"/ui/problems/{pid}?gpu={gpu}"),
        ("problem", "data", f"/ui/api/problems/{pid}/trials?gpu={gpu}"),
        ("jobs", "html", "/ui/jobs"),
        ("jobs", "html", "/ui/jobs?page=1000"),
        ("jobs", "data", "/ui/api/jobs/active"),
        ("workers", "html", "/ui/workers"),
        ("workers", "data", "/ui/api/workers"),
        ("shapes", "html", "/ui/shapes"),
        ("shapes", "data", f"/ui/api/shapes?kind=gemm&gpu={gpu}"),
        ("shapes", "data", f"/ui/api/shapes?kind=attention&gpu={gpu}"),
    ]


def measure(base: str, runs: int) -> list[dict[str, Any]]:
    rows = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for page, kind, path in urls(base):
            for _ in range(2):
                client.get(path).raise_for_status()
            times, size = [], 0
            for _ in range(runs):  # each run, in order (sorted below)
                t0 = time.perf_counter()
                r = client.get(path)
                times.append((time.perf_counter() - t0) * 1000)
                r.raise_for_status()
                size = len(r.content)
            times.sort()
            rows.append({"page": page, "kind": kind, "path": path,
                         "median_ms": round(statistics.median(times), 1),
                         "p90_ms": round(times[int(0.9 * (len(times) - 1))], 1),
                         "max_ms": round(times[-1], 1), "bytes": size,
                         "within_budget": times[int(0.9 * (len(times) - 1))] < BUDGET_MS})
            print(f"{rows[-1]['median_ms']:8.1f} {rows[-1]['p90_ms']:8.1f} "
                  f"{rows[-1]['max_ms']:8.1f}  {path}", file=sys.stderr)
    return rows


def serve(url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = dict(os.environ, KS_DATABASE_URL=url)
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "service.app:create_app",
                             "--factory", "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", "warning", "--no-access-log"], env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.2)
        if proc.poll() is not None:
            break
    proc.terminate()
    raise RuntimeError(f"the service did not start on {base}")


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in
                   Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "os": platform.platform(),
            "python": platform.python_version(),
            **{p: version(p) for p in ("fastapi", "starlette", "uvicorn", "sqlalchemy",
                                       "jinja2", "plotly", "psycopg")}}


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    db = meta["database"]
    lines = [
        f"# Dashboard page timings: {meta['label']}", "",
        f"{db['problems']:,} problems ({db['tuned_rows']:,} problem x GPU rows), "
        f"{db['measurements']:,} measurements, {db['jobs']:,} jobs, {db['decisions']:,} "
        f"decisions ({db['server']}); the SYNTHETIC database of `scripts.dashboard.seed`.",
        f"Machine: {meta['machine']['cpu']}, {meta['machine']['cores']} cores; "
        + ", ".join(f"{k} {v}" for k, v in meta["machine"].items()
                    if k not in ("cpu", "cores")) + f". Date: {meta['date']}.", "",
        f"Commands (at {meta['commit']}): `{meta['seed']}`, then `{meta['command']}`.", "",
        f"Each URL fetched {meta['runs']} times after 2 warm-ups, one request at a time, by a "
        "client on the same machine; wall time to the last byte, in ms. Budget: "
        f"{BUDGET_MS:.0f} ms at the 90th percentile (the slowest run is shown: on a shared "
        "machine it catches other processes' bursts). Load average (1, 5, 15 min) before and "
        f"after: {meta['load_before_after'][:3]}, {meta['load_before_after'][3:]} (other "
        "work on the machine shares its two cores).", "",
        "| page | what | URL | median | p90 | max | KB | under budget |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(f"| {r['page']} | {r['kind']} | `{r['path']}` | {r['median_ms']} | "
                     f"{r['p90_ms']} | {r['max_ms']} | {r['bytes'] / 1024:.0f} | "
                     f"{'yes' if r['within_budget'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.dashboard.timings",
                                 description=(__doc__ or "").strip().splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--name", default=None, help="file name (default dashboard_<dialect>)")
    ap.add_argument("--label", default=None, help="the report's title (default: the dialect)")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args(argv)
    dialect = "postgres" if args.url.startswith("postgres") else "sqlite"
    name = args.name or f"dashboard_{dialect}"
    proc, base = serve(args.url)
    load = [round(x, 2) for x in os.getloadavg()]
    try:
        rows = measure(base, args.runs)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    load += [round(x, 2) for x in os.getloadavg()]
    argv_shown = [a if "@" not in a else "<database url>" for a in sys.argv[1:]]
    meta = {"label": args.label or dialect,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": _commit(),
            "command": "python -m scripts.dashboard.timings " + shlex.join(argv_shown),
            "seed": "python -m scripts.dashboard.seed <database url> (its defaults: 10,000 "
                    "problems, 1,000,000 measurements, seed 0)",
            "runs": args.runs, "machine": machine(), "database": counts(args.url),
            "budget_ms": BUDGET_MS, "load_before_after": load}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.md").write_text(report(rows, meta))
    (args.out / f"{name}.json").write_text(
        json.dumps({**meta, "rows": rows}, separators=(",", ":")) + "\n")
    print(report(rows, meta))
    return 0 if all(r["within_budget"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
