"""Search space of the CUTLASS library GEMMs (``kernel_templates/gemm/cutlass``).

A configuration is a plain dict::

    {"op": "<CUTLASS operation name>", "raster": "heuristic", "swizzle": 1, "splits": 1}

``op`` fixes everything decided at compile time (tile, cluster, kernel and epilogue schedule,
tile scheduler, stages: CUTLASS's builders choose the stage count from the shared memory left by
the epilogue, so it is part of the op). The other keys are runtime knobs of the SM90 tile
schedulers and cost no recompilation:

- ``raster`` (``heuristic``/``along_m``/``along_n``) and ``swizzle`` (1, 2, 4, 8): the order in
  which a persistent kernel walks output tiles. Non-persistent kernels launch a CTA per tile and
  ignore both, so there they are fixed at ``heuristic``/1 (no trial is spent on a no-op).
- ``splits``: split-K factor of the stream-K tile scheduler; 1 lets its heuristic choose between
  data-parallel and stream-K. Other kernels take 1 only.

This module never imports torch or ``cutlass_library``: operations are described by any object
with the attributes of ``OpLike`` (``kernel_templates.gemm.cutlass.CutlassOp`` has them).
``nvMatmulHeuristics`` is imported lazily, only by ``rank``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from search.kinds.gemm.spec import GemmProblem

__all__ = ["KNOBS", "RASTERS", "SPLITS", "SWIZZLES", "OpLike", "Ranked", "analytic_estimate_us",
           "configs", "default_config", "direct_store", "diverse", "epilogue_us", "heuristics_gpu",
           "is_persistent", "rank", "seeds", "violations"]

RASTERS = ("heuristic", "along_m", "along_n")
SWIZZLES = (1, 2, 4, 8)
SPLITS = (1, 2, 3, 4, 8, 16)
KNOBS = ("raster", "swizzle", "splits")

#: SM counts of the GPUs the analytic order knows (nvMatmulHeuristics names).
SM_COUNTS = {"H100_SXM": 132, "H100_PCIE": 114, "H100_NVL": 132, "H200_SXM": 132,
             "H20_SXM": 78}


class OpLike(Protocol):
    """What the space needs to know about an operation."""

    name: str
    tile: tuple[int, int, int]
    cluster: tuple[int, int, int]
    kernel_schedule: str
    epilogue_schedule: str
    tile_scheduler: str
    dtype_a: str
    dtype_c: str | None


def is_persistent(op: OpLike) -> bool:
    """See ``CutlassOp.persistent``: cooperative, ping-pong and Auto (which resolves to one of
    them for 16-byte aligned operands) walk tiles with the tile scheduler."""
    s = op.kernel_schedule
    return "Cooperative" in s or "Pingpong" in s or s == "ScheduleAuto"


def _stream_k(op: OpLike) -> bool:
    return op.tile_scheduler == "stream_k"


def _tiles(problem: GemmProblem, op: OpLike) -> tuple[int, int, int]:
    tm, tn, tk = op.tile
    return -(-problem.m // tm), -(-problem.n // tn), -(-problem.k // tk)


def default_config(op: OpLike) -> dict[str, Any]:
    """The op with the knobs at CUTLASS's defaults."""
    return {"op": op.name, "raster": "heuristic", "swizzle": 1, "splits": 1}


def configs(problem: GemmProblem, op: OpLike) -> list[dict[str, Any]]:
    """Every feasible knob setting of ``op`` for ``problem``, the default first."""
    rasters = RASTERS if is_persistent(op) else RASTERS[:1]
    swizzles = SWIZZLES if is_persistent(op) else SWIZZLES[:1]
    splits = SPLITS if _stream_k(op) else SPLITS[:1]
    out = []
    for s in splits:
        for r in rasters:
            for w in swizzles:
                cfg = {"op": op.name, "raster": r, "swizzle": w, "splits": s}
                if not violations(problem, cfg, {op.name: op}):
                    out.append(cfg)
    return out


def violations(problem: GemmProblem, config: dict[str, Any],
               ops: dict[str, OpLike]) -> list[str]:
    """Every rule ``config`` breaks for ``problem`` (empty: feasible). ``ops`` maps the names of
    the operations that serve the problem (``kernel_templates.gemm.cutlass.ops_for``) to them."""
    missing = [k for k in ("op", *KNOBS) if k not in config]
    if missing:
        return [f"missing key(s) {', '.join(missing)}"]
    extra = sorted(set(config) - {"op", *KNOBS})
    if extra:
        return [f"unknown key(s) {', '.join(extra)}"]
    op = ops.get(config["op"])
    if op is None:
        return [f"op {config['op']!r} does not serve this problem"]
    out: list[str] = []
    raster, swizzle, splits = config["raster"], config["swizzle"], config["splits"]
    if raster not in RASTERS:
        out.append(f"raster={raster!r} is not one of {', '.join(RASTERS)}")
    if swizzle not in SWIZZLES:
        out.append(f"swizzle={swizzle!r} is not one of {SWIZZLES}")
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        out.append(f"splits={splits!r} is not a positive integer")
    if out:
        return out
    tiles_m, tiles_n, tiles_k = _tiles(problem, op)
    if not is_persistent(op) and (raster != "heuristic" or swizzle != 1):
        out.append(f"{op.kernel_schedule} is not persistent: raster and swizzle do nothing")
    if swizzle > 1 and swizzle > max(tiles_m, tiles_n):
        out.append(f"swizzle={swizzle} is wider than the {tiles_m}x{tiles_n} tile grid")
    if splits > 1 and not _stream_k(op):
        out.append("splits > 1 needs the stream-K tile scheduler")
    if splits > tiles_k:
        out.append(f"splits={splits} is over the {tiles_k} k-tiles of k={problem.k}")
    cm, cn, _ = op.cluster
    if cm > 1 and tiles_m < cm:
        out.append(f"cluster {cm} along m is over the {tiles_m} tile row(s) of m={problem.m}")
    if cn > 1 and tiles_n < cn:
        out.append(f"cluster {cn} along n is over the {tiles_n} tile column(s) of "
                   f"n={problem.n}")
    return out


# -- ranking --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ranked:
    """An operation's place in the compile order: the estimated time of its default config and
    where the estimate came from (``nvmmh``: nvMatmulHeuristics' model of ``gpu``; ``analytic``:
    the wave/tile model below)."""

    op: str
    est_us: float
    source: str


def heuristics_gpu(gpu_model: str | None) -> str | None:
    """The nvMatmulHeuristics GPU name for a device name ("NVIDIA H100 80GB HBM3" ->
    ``H100_SXM``), ``None`` when unknown. nvMatmulHeuristics models an A100 when given no GPU,
    so an unknown device must fall back to the analytic order, never to its default."""
    if not gpu_model:
        return None
    g = gpu_model.upper().replace("-", " ")
    if g.replace(" ", "_") in SM_COUNTS:
        return g.replace(" ", "_")
    if "H100" in g:
        return "H100_PCIE" if "PCIE" in g else "H100_NVL" if "NVL" in g else "H100_SXM"
    if "H200" in g:
        return "H200_SXM"
    if "H20" in g.split():
        return "H20_SXM"
    return None


#: Relative throughput of a CTA tile (fraction of peak a persistent SM90 kernel reaches with it):
#: bigger tiles reuse each loaded byte for more math. Rough, only the order matters.
_TILE_EFF = {64 * 128: 0.62, 64 * 256: 0.78, 128 * 128: 0.80, 128 * 256: 0.95, 256 * 128: 0.95,
             256 * 256: 0.93}


#: fp8 kernels without fast accumulation promote the WGMMA accumulator into fp32 every few
#: k-blocks: on the H100 each was 1.1-3.2x slower than its FP8FastAccum twin at 4096^3 (320 vs
#: 100 us for 128x256x128 2x1x1; ``tests/data/h100_cutlass_trials.json``)
_FP8_PROMOTION_PENALTY = 1.5


def _schedule_penalty(op: OpLike) -> float:
    s = op.kernel_schedule
    if s.startswith("CpAsync"):
        base = 1.25  # no TMA: loads through registers, unaligned-friendly but slower
    elif not is_persistent(op):
        base = 1.08  # a CTA per tile: launch and prologue per tile
    else:
        base = 1.0
    promotes = op.dtype_a.startswith("fp8") and "FastAccum" not in s
    return base * (_FP8_PROMOTION_PENALTY if promotes else 1.0)


#: fp32 accumulators one thread can hold without spilling (of the 255 registers an SM90 thread
#: may use, the rest hold addresses, fragments and the pipeline's state)
_ACC_REGS = 128
#: what a spilling kernel costs: the H100 runs measured 10-14x (128x256 ping-pong: 448 us
#: against 33 us for its cooperative twin at 32768x512x512); only the order matters
_SPILL_PENALTY = 8.0


def accumulators_per_thread(op: OpLike) -> float:
    """fp32 accumulators per thread of the warp groups that own a tile: a ping-pong kernel
    gives each output tile to *one* consumer warp group (128 threads; the other works on the
    next tile), a cooperative one splits it over two (256), the plain warp-specialised and
    cp.async ones have one consumer warp group."""
    tm, tn, _ = op.tile
    threads = 256 if "Cooperative" in op.kernel_schedule or op.kernel_schedule == "ScheduleAuto" \
        else 128
    return tm * tn / threads


def spill_penalty(op: OpLike) -> float:
    """How much slower a kernel whose accumulators do not fit in registers runs (1.0: they
    fit). nvMatmulHeuristics sees tile and cluster only, so it ranks a 128x256 ping-pong kernel
    (256 accumulators per thread: spills) with its cooperative twin (128: fits)."""
    if getattr(op, "baseline", False):
        return 1.0
    return _SPILL_PENALTY if accumulators_per_thread(op) > _ACC_REGS else 1.0


#: How fast an epilogue that stores the output straight from registers writes it (bytes/s).
#: On the H100 every such op (``NoSmemWarpSpecialized``, and ``ScheduleAuto``, which resolved to
#: it: same times) took longer than its TMA-epilogue twin, by about the output's size over
#: 0.45-0.8 TB/s: +50 us on 4096^2 bf16 outputs (180 -> 230 us at 4096^3, 100 -> 152 us for
#: fp8), +60 us at 32768x512x512, +12 us at 1000x3000, +5-9 us at 128x14336, nothing at 16x4096
#: (``tests/data/h100_cutlass_trials.json``: the TMA store overlaps the next tile's mainloop,
#: uncoalesced register stores do not). Ping-pong kernels hid part of it behind the other warp
#: group's mainloop on long-k problems only (1.2-2.7 TB/s at 4096^3, 0.5-0.6 at 32768x512x512):
#: one rate serves both.
_DIRECT_STORE_BPS = 0.65e12


def direct_store(op: OpLike) -> bool:
    """Whether ``op``'s epilogue writes the output from registers (no shared-memory staging,
    no TMA store)."""
    e = op.epilogue_schedule
    return e.startswith("NoSmem") or e == "ScheduleAuto"


def epilogue_us(problem: GemmProblem, op: OpLike) -> float:
    """What ``op``'s epilogue adds beyond the mainloop: the output's bytes at
    :data:`_DIRECT_STORE_BPS` for a direct-store epilogue, nothing for a TMA one."""
    return problem.out_bytes / _DIRECT_STORE_BPS * 1e6 if direct_store(op) else 0.0


def analytic_estimate_us(problem: GemmProblem, op: OpLike, sm_count: int = 132,
                         peak_tflops: float = 800.0) -> float:
    """A simple time model: waves of output tiles (fractional for stream-K, whole otherwise)
    times the time of one tile at the tile's efficiency, plus a memory floor, plus what a
    direct-store epilogue adds (``epilogue_us``). The tile work includes padding, so a
    256-wide tile on a 300-wide problem pays for 512."""
    tm, tn, tk = op.tile
    tiles_m, tiles_n, tiles_k = _tiles(problem, op)
    tiles = tiles_m * tiles_n * problem.batch
    cm, cn, _ = op.cluster
    # a cluster occupies cm*cn SMs at once; idle cluster slots at the edges still cost
    tiles = -(-tiles_m // cm) * cm * -(-tiles_n // cn) * cn * problem.batch
    waves = tiles / sm_count if _stream_k(op) else math.ceil(tiles / sm_count)
    if _stream_k(op):
        waves *= 1.04  # the partial-tile fixup
    eff = _TILE_EFF.get(tm * tn, 0.7)
    if problem.dtype == "fp8_e4m3":
        peak_tflops *= 2
    tile_us = 2 * tm * tn * tiles_k * tk / (peak_tflops * 1e12 * eff / sm_count) * 1e6
    compute_us = waves * tile_us * _schedule_penalty(op) * spill_penalty(op)
    memory_us = problem.min_bytes / 3.0e12 * 1e6
    return max(compute_us, memory_us) + epilogue_us(problem, op) + 3.0


def _nvmmh_layout(problem: GemmProblem) -> str:
    # cutlass_library's heuristics provider: 't' for a row-major operand, output row-major
    a = "T" if problem.layout_a == "row" else "N"
    b = "T" if problem.layout_b == "row" else "N"
    return f"{a}{b}_ROW_MAJOR"


_PRECISION = {"bf16": "T", "fp16": "H", "fp32": "S"}


def _nvmmh_precision(problem: GemmProblem) -> str | None:
    out = _PRECISION.get(problem.out_dtype or problem.dtype)
    if out is None:
        return None
    if problem.dtype == "fp8_e4m3":
        return f"QQ{out}S{out}"  # A, B, C, compute, D
    if problem.dtype in _PRECISION:
        return f"{_PRECISION[problem.dtype]}S{out}"
    return None


class _Nvmmh:
    """nvMatmulHeuristics' runtime estimate of given CUTLASS3 configurations on one GPU."""

    def __init__(self, gpu: str) -> None:
        import ctypes

        import nvMatmulHeuristics as h

        self._h, self._ct = h, ctypes
        self.lh = h.NvMatmulHeuristicsInterfaceEx(
            backend=h.NvMatmulHeuristicsTarget.CUTLASS3,
            flags=h.NvMatmulHeuristicsFlags.PERF_MODEL_BASED_AUTO_TUNING,
            load_discovery_implicitly=True, gpu=h.NvMatmulHeuristicsNvidiaGpu[gpu])

    def estimate_us(self, problem: GemmProblem, precision: str,
                    ops: Sequence[OpLike]) -> list[float | None]:
        h, ct, lh = self._h, self._ct, self.lh
        layout = h.NvMatmulHeuristicsMatmulLayout[_nvmmh_layout(problem)]
        mp = lh.makeNvMatmulHeuristicsProblem(problem.m, problem.n, problem.k, layout,
                                              problem.batch)
        lh.loadInternalDiscoverySet(layout, precision)
        out: list[float | None] = []
        instr_k = 32 if problem.dtype == "fp8_e4m3" else 16
        for op in ops:
            tm, tn, tk = op.tile
            cfg = lh.nvmmhKernelConfiguration()
            cfg.cta[:] = (tm, tn, tk)
            cfg.warp[:] = (64, min(tn, 64), tk)
            cfg.instr[:] = (64, 8, instr_k)
            cfg.splitK, cfg.loadStages, cfg.gridSwizzle, cfg.ctaOrder = 1, 0, 1, 0
            cfg.cluster[:] = (op.cluster[0], op.cluster[1])
            s = lh.nvMatmulHeuristicsEstimateRuntime(
                lh.handle, precision.encode("ascii"),
                ct.c_int(h.NvMatmulHeuristicsTarget.CUTLASS3), ct.byref(mp), ct.byref(cfg),
                lh.hardware_descriptor)
            out.append(s * 1e6 if s and math.isfinite(s) and s > 0 else None)
        return out


_NVMMH: dict[str, _Nvmmh] = {}


def _nvmmh(gpu: str) -> _Nvmmh | None:
    if gpu not in _NVMMH:
        try:
            _NVMMH[gpu] = _Nvmmh(gpu)
        except (ImportError, OSError, KeyError, RuntimeError, AssertionError):
            return None
    return _NVMMH[gpu]


def rank(problem: GemmProblem, ops: Iterable[OpLike], gpu: str | None = "H100_SXM",
         use_heuristics: bool = True) -> list[Ranked]:
    """``ops`` fastest first by estimate: nvMatmulHeuristics for ``gpu`` (a name it knows, or a
    device name ``heuristics_gpu`` maps) where installed and able to model the tile, else the
    analytic model. Estimates it has are ranked ahead of analytic ones (the two scales differ).
    nvMatmulHeuristics sees tile and cluster only, so ops that share them are ordered by the
    analytic model's view of their schedules (persistent TMA first; stream-K where waves are
    ragged)."""
    ops = list(ops)
    name = heuristics_gpu(gpu)
    sms = SM_COUNTS.get(name or "", 132)
    analytic = [analytic_estimate_us(problem, op, sms) for op in ops]
    model: list[float | None] = [None] * len(ops)
    precision = _nvmmh_precision(problem)
    if use_heuristics and name is not None and precision is not None:
        lh = _nvmmh(name)
        if lh is not None:
            model = lh.estimate_us(problem, precision, ops)
    ranked = []
    for op, a, mdl in zip(ops, analytic, model, strict=True):
        if mdl is not None:
            # scale by this op's schedule relative to a plain persistent op of its tile
            base = analytic_estimate_us(problem, _Plain(op), sms)
            ranked.append((0, mdl * a / base, a, op.name, "nvmmh"))
        else:
            ranked.append((1, a, a, op.name, "analytic"))
    # On ties: void-C ops (no C buffer: more smem for stages) ahead of their twins, then TMA
    # epilogues ahead of the register-direct (no-smem) ones.
    prefer = {op.name: (op.dtype_c is not None, op.epilogue_schedule.startswith("NoSmem"))
              for op in ops}
    ranked.sort(key=lambda r: (r[0], round(r[1], 3), prefer[r[3]], r[3]))
    return [Ranked(op=r[3], est_us=round(r[1], 3), source=r[4]) for r in ranked]


@dataclass(frozen=True)
class _Plain:
    """``op``'s tile and cluster under a default persistent schedule (the rank baseline)."""

    op: OpLike

    @property
    def tile(self) -> tuple[int, int, int]:
        return self.op.tile

    @property
    def cluster(self) -> tuple[int, int, int]:
        return self.op.cluster

    kernel_schedule = "TmaWarpSpecializedCooperative"
    tile_scheduler = "default"
    baseline = True  # the schedule-free reference: no spill penalty of its own
    name = ""
    epilogue_schedule = ""
    dtype_a = ""
    dtype_c = None


def diverse(ranked: Sequence[Ranked], ops: Iterable[OpLike], per_group: int = 2
            ) -> list[Ranked]:
    """``ranked`` reordered so that no (tile, cluster) takes more than ``per_group`` places
    before every group has had its turn: the model sees tile and cluster only, so its top ten
    are often one tile under ten schedules, and a first compiled batch learns more from several
    tiles."""
    key = {op.name: (op.tile, op.cluster) for op in ops}
    first, rest, count = [], [], {}
    for r in ranked:
        g = key[r.op]
        count[g] = count.get(g, 0) + 1
        (first if count[g] <= per_group else rest).append(r)
    return first + rest


def seeds(problem: GemmProblem, ops: Iterable[OpLike], n: int = 8,
          gpu: str | None = "H100_SXM", per_group: int = 2,
          ranked: Sequence[Ranked] | None = None) -> list[dict[str, Any]]:
    """The first batch to compile: the ``n`` best-ranked ops (at most ``per_group`` per tile and
    cluster, see ``diverse``) whose default config is feasible, with default knobs. ``ranked``:
    ``rank(problem, ops, gpu)`` where the caller has it already (the estimates are not free)."""
    ops = list(ops)
    by_name = {op.name: op for op in ops}
    out = []
    if ranked is None:
        ranked = rank(problem, ops, gpu)
    for r in diverse(ranked, ops, per_group):
        cfg = default_config(by_name[r.op])
        if not violations(problem, cfg, by_name):
            out.append(cfg)
        if len(out) >= n:
            break
    return out
