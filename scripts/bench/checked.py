"""One probe measurement: check a kernel on a NaN-poisoned output against the reference, then
time it (the probes' shared rule: nothing is timed before its result is checked)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def checked_timing(sets: Sequence[Any], refs: Sequence[Any], calls: Sequence[Callable[[], Any]],
                   bench: Callable[[Sequence[Callable[[], Any]]], Any],
                   tolerance: float = 2e-2) -> dict[str, Any]:
    """``calls[i]`` computes into ``sets[i].out``. The first runs once on a NaN-filled output
    and must come within ``tolerance`` (relative error) of ``refs[0]``; then ``bench`` times
    them all, rotating. Returns ``{"us", "p20", "p80", "err"}``, or ``{"error"}`` for a wrong
    result."""
    import torch

    from kernel_templates.gemm.reference import rel_error

    sets[0].out.fill_(float("nan"))
    calls[0]()
    torch.cuda.synchronize()
    err = rel_error(sets[0].out, refs[0])
    if not err < tolerance:
        return {"error": f"wrong result: rel_error {err}"}
    t = bench(calls)
    return {"us": round(t.median_us, 3), "p20": round(t.p20_us, 3), "p80": round(t.p80_us, 3),
            "err": err}


def checked_makers(makers: dict[str, Callable[[Any], Callable[[], Any]]], sets: Sequence[Any],
                   refs: Sequence[Any], repeats: int, shape: str, rows: list[dict[str, Any]],
                   tolerance: float = 2e-2) -> dict[str, list[Callable[[], Any]]]:
    """Each ``makers[name](set)`` is a call computing into ``set.out``. Every set's result on a
    NaN-filled output is compared with its reference, then ``repeats`` launches on the first
    set with the first result, bitwise. A row per name goes to ``rows`` (errors included);
    returned: the calls over every set of the names within ``tolerance`` and repeatable."""
    import json

    import torch

    from kernel_templates.gemm.reference import rel_error

    calls: dict[str, list[Callable[[], Any]]] = {}
    for name, make in makers.items():
        row: dict[str, Any] = {"shape": shape, "name": "check " + name}
        try:
            errs = []
            for st, ref in zip(sets, refs, strict=True):
                st.out.fill_(float("nan"))
                make(st)()
                torch.cuda.synchronize()
                errs.append(rel_error(st.out, ref))
            first, bad = sets[0].out.clone(), 0
            for _ in range(repeats):
                sets[0].out.fill_(float("nan"))
                make(sets[0])()
                bad += int(not torch.equal(sets[0].out, first))
            row.update(err=max(errs), repeats=repeats, repeat_mismatches=bad)
            if max(errs) < tolerance and bad == 0:
                calls[name] = [make(st) for st in sets]
        except Exception as exc:  # noqa: BLE001 - a probe records what failed and goes on
            row["error"] = repr(exc)[:300]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return calls


def interleaved(calls: dict[str, list[Callable[[], Any]]],
                bench: Callable[[Sequence[Callable[[], Any]]], Any], shape: str,
                rows: list[dict[str, Any]], rounds: int = 7, prefix: str = "") -> None:
    """``rounds`` rounds, each timing every name once (``bench``'s median); a row per name
    (``prefix`` + name) with the median of the rounds, their range and the rounds themselves
    goes to ``rows``."""
    per: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fns in calls.items():
            per[name].append(bench(fns).median_us)
    for name, us in per.items():
        s = sorted(us)
        mid = s[len(s) // 2]
        rows.append({"shape": shape, "name": prefix + name, "us": mid, "min_us": s[0],
                     "max_us": s[-1], "rounds": us})
        print(f"{shape:>16} {mid:8.2f} ({s[0]:.2f}-{s[-1]:.2f}) {prefix}{name}", flush=True)


def fastest(calls: dict[str, list[Callable[[], Any]]],
            bench: Callable[[Sequence[Callable[[], Any]]], Any], shape: str,
            rows: list[dict[str, Any]], top: int) -> list[str]:
    """Every name timed once (``bench``'s median; a ``"pass": 1`` row each, fastest first, to
    ``rows``); returned: the ``top`` fastest names, the probes' finalists for ``interleaved``."""
    timed = sorted((bench(fns).median_us, name) for name, fns in calls.items())
    for us, name in timed:
        rows.append({"shape": shape, "name": name, "us": us, "pass": 1})
        print(f"{shape:>16} {us:8.2f} pass 1 {name}", flush=True)
    return [name for _, name in timed[:top]]


def probe_mode(argv: Sequence[str], prog: str, modes: Sequence[str]) -> str:
    """The probe's mode: ``argv[1]``, default the first of ``modes``; ``SystemExit`` with the
    usage for any other."""
    which = argv[1] if len(argv) > 1 else modes[0]
    if which not in modes:
        raise SystemExit(f"usage: {prog} [{'|'.join(modes)}], got {which!r}")
    return which


def run_probe(main: Callable[[], Any], out: str, filename: str,
              rows: list[dict[str, Any]]) -> None:
    """A probe's entry point: the GPU and versions printed, ``main()`` run, then ``rows``
    written to ``out/filename`` however ``main`` ended (a probe cut short keeps what it
    measured)."""
    import json
    import os

    os.makedirs(out, exist_ok=True)
    try:
        import torch
        import triton

        if torch.cuda.is_available():
            print(torch.cuda.get_device_name(), torch.__version__, triton.__version__,
                  flush=True)
        main()
    finally:
        with open(os.path.join(out, filename), "w") as f:
            json.dump(rows, f, indent=1)
