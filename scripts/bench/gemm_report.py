"""The GEMM benchmark's arithmetic and report (``scripts/bench/gemm.py``): what a job served,
the issue's target for a shape's class and whether it was met, and the Markdown table. Pure
functions over the stored decision's JSON shape (no GPU; tested on the CPU)."""

from __future__ import annotations

from typing import Any

from search.types import config_key

__all__ = ["contenders", "render", "served_row", "target"]

#: The issue's targets (issue 18), by the shape's class in the shapes file.
UNALIGNED_SPEEDUP = 2.0
HARD_SPEEDUP = 1.25
ROOFLINE_SHARE = 0.85


def _key(backend: str, config: dict[str, Any]) -> tuple[str, str]:
    return backend, config_key(dict(config))


def best_cutlass(decision: dict[str, Any]) -> dict[str, Any] | None:
    """The fastest correct CUTLASS library trial of the job (first stage or search)."""
    ok = [t for t in decision.get("library_trials") or []
          if t.get("backend") == "cutlass" and t.get("status") == "ok" and t.get("median_us")]
    return min(ok, key=lambda t: t["median_us"]) if ok else None


def contenders(decision: dict[str, Any] | None) -> dict[str, tuple[str, dict[str, Any]]]:
    """What the side-by-side re-measures interleaved, by name, each once: ``cublas`` (the plain
    library baseline), ``cutlass`` (the job's best CUTLASS op, if any ran) and ``served`` (the
    decision's pick, when it is neither of those)."""
    out: dict[str, tuple[str, dict[str, Any]]] = {"cublas": ("cublas", {})}
    cut = best_cutlass(decision or {})
    if cut is not None:
        out["cutlass"] = ("cutlass", dict(cut["config"]))
    if decision and decision.get("backend"):
        served = (str(decision["backend"]), dict(decision.get("config") or {}))
        if _key(*served) not in {_key(*c) for c in out.values()}:
            out["served"] = served
    return out


def served_row(decision: dict[str, Any] | None, timed: dict[str, dict[str, Any]]
               ) -> dict[str, Any]:
    """The served kernel's numbers from the side-by-side ``timed`` (``name -> {us, ...}``):
    its time, speed-up over cuBLAS and share of the roofline (the decision's attainable time
    over the served time: its efficiency against the calibrated ceilings)."""
    d = decision or {}
    if not d.get("backend"):
        return {}
    served = (str(d["backend"]), dict(d.get("config") or {}))
    name = next((n for n, c in contenders(d).items() if _key(*c) == _key(*served)), "served")
    row: dict[str, Any] = {"served_backend": served[0], "served_config": served[1]}
    got = timed.get(name) or {}
    cublas = (timed.get("cublas") or {}).get("us")
    if got.get("us"):
        row["served_us"] = got["us"]
        if cublas:
            row["served_vs_cublas"] = cublas / got["us"]
        if d.get("attainable_us"):
            # at most 1, as the decision's efficiencies: a time under the roofline means the
            # calibration was pessimistic (the raw ratio is kept beside it)
            row["served_roofline_share_raw"] = d["attainable_us"] / got["us"]
            row["served_roofline_share"] = min(1.0, row["served_roofline_share_raw"])
    return row


def served_resolved(row: dict[str, Any], trials: list[dict[str, Any]]) -> str | None:
    """What the served library call ran, as its trial's measurement named it (a ``cublaslt``
    rank's algorithm, tile and options: ``extra["resolved"]``); None when it named nothing."""
    key = _key(row.get("served_backend") or "", row.get("served_config") or {})
    for t in trials:
        resolved = (t.get("extra") or {}).get("resolved")
        if resolved and _key(t.get("backend") or "", t.get("config") or {}) == key:
            return str(resolved.get("describe") or resolved)
    return None


def target(shape_class: str, row: dict[str, Any]) -> dict[str, Any]:
    """The issue's target for a shape of ``shape_class`` (the shapes file's ``class``) and
    whether ``row`` meets it; ``{}`` for a class the issue sets no target for."""
    speedup, share = row.get("served_vs_cublas"), row.get("served_roofline_share")
    cls = shape_class.lower()
    if cls.startswith("unaligned"):
        return {"target": f"served >= {UNALIGNED_SPEEDUP}x cuBLAS",
                "met": speedup is not None and speedup >= UNALIGNED_SPEEDUP}
    if cls.startswith(("long k", "mid m")):
        return {"target": f"served >= {HARD_SPEEDUP}x cuBLAS or >= {ROOFLINE_SHARE:.0%} of the "
                          "roofline",
                "met": (speedup is not None and speedup >= HARD_SPEEDUP)
                or (share is not None and share >= ROOFLINE_SHARE)}
    if cls.startswith("decode"):
        return {"target": f">= {ROOFLINE_SHARE:.0%} of the calibrated copy bandwidth",
                "met": share is not None and share >= ROOFLINE_SHARE}
    return {}


def _f(v: Any, fmt: str = "{:.2f}") -> str:
    return "—" if v is None else fmt.format(v)


def render(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The Markdown report: one row per shape, side by side."""
    cal = meta.get("calibration") or {}
    lines = [f"GEMM benchmark on {meta['gpu']} ({meta.get('sm_count')} SMs), driver "
             f"{meta.get('driver')}, CUDA {meta.get('cuda')}, torch {meta.get('torch')}, triton "
             f"{meta.get('triton')}, {str(meta.get('date', ''))[:10]}; policy "
             f"{meta.get('policy')}, budget {meta.get('trials')} custom trials per shape, "
             f"backends {meta.get('backends')}; side by side: medians of {meta.get('rounds')} "
             "interleaved rounds (cuBLAS, the best CUTLASS op, the served kernel).", "",
             f"Calibration: copy {_f(cal.get('bandwidth_gbs'), '{:.0f}')} GB/s, peaks "
             f"{cal.get('peak_tflops')} TFLOP/s.", "",
             "| shape | class | verdict | served | cuBLAS µs | best CUTLASS µs | served µs | "
             "served/cuBLAS | roofline share | max-autotune µs | served vs max-autotune | "
             "trials (custom) | tuning s | target | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r.get("served_backend"):
            lines.append(f"| {r['shape']} | {r.get('class', '')} | not served: "
                         f"{str(r.get('reason') or r.get('job_status'))[:90]} |" + " |" * 12)
            continue
        met = "" if "met" not in r else ("yes" if r["met"] else "NO")
        lines.append(
            f"| {r['shape']} | {r.get('class', '')} | {r.get('verdict')} | "
            f"{r['served_backend']} | {_f(r.get('cublas_us'))} | {_f(r.get('cutlass_us'))} | "
            f"{_f(r.get('served_us'))} | {_f(r.get('served_vs_cublas'), '{:.3f}')} | "
            f"{_f(r.get('served_roofline_share'), '{:.0%}')} | "
            f"{_f(r.get('max-autotune_us'))} | {_f(r.get('served_vs_max_autotune'), '{:.3f}')} "
            f"| {r.get('trials_custom')} | {_f(r.get('tuning_s'), '{:.0f}')} | "
            f"{r.get('target', '')} | {met} |")
    return "\n".join(lines) + "\n"
