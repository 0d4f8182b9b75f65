"""The load benchmark's report: locust's per-endpoint statistics against the issue's targets,
as a Markdown table and JSON (every run of one date in one file)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

#: the targets: p99 in ms per endpoint, and the least rate of ``GET /v1/best``
P99_MS = {"GET /v1/best": 50.0, "POST lease": 100.0, "POST report": 100.0}
BEST_RPS = 500.0


def endpoints(stats_csv: Path) -> list[dict[str, Any]]:
    """Per endpoint: requests, failures, rate, p50 and p99 (ms) from locust's ``_stats.csv``."""
    out = []
    with stats_csv.open() as f:
        for row in csv.DictReader(f):
            if row["Name"] == "Aggregated":
                continue
            out.append({"endpoint": row["Name"], "requests": int(row["Request Count"]),
                        "errors": int(row["Failure Count"]),
                        "rps": round(float(row["Requests/s"]), 1),
                        "p50_ms": _ms(row["50%"]), "p99_ms": _ms(row["99%"]),
                        "max_ms": _ms(row["100%"])})
    return out


def failures(failures_csv: Path, limit: int = 8) -> list[dict[str, Any]]:
    """The most frequent failures (endpoint, message, count)."""
    if not failures_csv.exists():
        return []
    with failures_csv.open() as f:
        rows = [{"endpoint": r["Name"], "error": r["Error"][:300],
                 "count": int(r["Occurrences"])} for r in csv.DictReader(f)]
    return sorted(rows, key=lambda r: -r["count"])[:limit]


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each target met or missed."""
    by = {r["endpoint"]: r for r in rows}
    out: dict[str, Any] = {}
    best = by.get("GET /v1/best")
    if best is not None:
        out["GET /v1/best rps >= 500"] = best["rps"] >= BEST_RPS
    for name, limit in P99_MS.items():
        if name in by:
            out[f"{name} p99 < {limit:.0f} ms"] = by[name]["p99_ms"] < limit
    out["zero errors"] = sum(r["errors"] for r in rows) == 0
    return out


#: the line after which a report's hand-written findings start; rewriting the report keeps them
FINDINGS = "<!-- findings: written by hand, kept when the report is rewritten -->"


def kept_findings(md: str | None) -> str:
    """The hand-written part of an existing report (from :data:`FINDINGS` on), if any."""
    if not md or FINDINGS not in md:
        return ""
    return md[md.index(FINDINGS):]


def markdown(runs: list[dict[str, Any]], findings: str = "") -> str:
    first = runs[0]
    m, db = first["machine"], first["database"]
    lines = [
        f"# Load benchmark: the API on Postgres, {first['date'][:10]}", "",
        f"Machine: {m['cpu']}, {m['cores']} cores; {m['os']}, python {m['python']}, "
        + ", ".join(f"{p} {m[p]}" for p in ("fastapi", "starlette", "uvicorn", "sqlalchemy",
                                            "psycopg", "locust") if p in m) + ".",
        f"Database: {db['server']}: {db['problems']:,} problems, {db['measurements']:,} "
        f"measurements, {db['decisions']:,} decisions, {db['jobs']:,} jobs at the start (the "
        "SYNTHETIC database of `scripts.dashboard.seed`, its defaults).", "",
        "Load: locust (one process) on the same machine as the API and Postgres, all sharing "
        "its cores; clients ask `GET /v1/best` for decided shapes (half of them naming the GPU "
        "model) and submit jobs, each at a fixed pace; simulated workers register, then "
        "lease up to 4 candidates and report FAKE plausible results in a loop. Statistics "
        "from the end of the ramp-up (`--reset-stats`). Times in ms; locust rounds "
        "percentiles above 100 ms to two significant digits.", "",
        "Targets (issue 20): `GET /v1/best` p99 < 50 ms at >= 500 requests/s; lease and report "
        "p99 < 100 ms; zero errors.", ""]
    for run in runs:
        load = run["load_average"]
        lines += [
            f"## {run['label']}", "",
            f"Command (at {run.get('commit') or '?'}): `{run['command']}`", "",
            f"{run['users']} clients offering {run['offered_rps']:.0f} requests/s "
            f"({run.get('job_share', 0.1):.0%} job submissions) and "
            f"{run['workers']} workers"
            + (f" (each {run['measure_s']:g} s per candidate before it reports)"
               if "measure_s" in run else "")
            + f" for {run['duration_s']} s; API processes: {run['processes']}"
            + (f" (planning: {run['planning']})" if "planning" in run else "")
            + "; every question asked twice before the run: "
            f"{'yes' if run.get('warm') else 'no'}. Load average (1 min) during the run: mean "
            f"{load['mean']:.1f}, max {load['max']:.1f} on {m['cores']} cores (before: "
            f"{load['before']}).", "",
            "| endpoint | requests | requests/s | p50 | p99 | max | errors |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        lines += [f"| {r['endpoint']} | {r['requests']} | {r['rps']} | {r['p50_ms']:g} | "
                  f"{r['p99_ms']:g} | {r['max_ms']:g} | {r['errors']} |"
                  for r in run["endpoints"] if r["requests"]]
        lines += ["", "| target | met |", "| --- | --- |"]
        lines += [f"| {t} | {'yes' if ok else '**no**'} |" for t, ok in run["targets"].items()]
        if run["failures"]:
            lines += ["", "Failures (most frequent):", ""]
            lines += [f"- {f['endpoint']}: {f['count']} x `{f['error']}`"
                      for f in run["failures"]]
        if run.get("note"):
            lines += ["", run["note"]]
        lines.append("")
    return "\n".join(lines) + (f"\n{findings}" if findings else "")


def _ms(value: str) -> float:
    return float(value) if value not in ("", "N/A") else float("nan")
