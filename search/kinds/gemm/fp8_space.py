"""Search space of the Triton fp8 e4m3 GEMM (``kernel_templates/gemm/fp8.py``): the ``fp8`` tier.

One tier serves two kinds of problem:

- **fp8 problems** (``dtype="fp8_e4m3"``): the operands are already fp8 with per-tensor scales;
  the template multiplies them (TMA loads, ``tl.dot`` on fp8: wgmma on sm_90), applies
  ``scale_a * scale_b`` in the epilogue and writes the output dtype.
- **bf16/fp16 problems whose policy allows ``fp8_e4m3``** (``policy.allow``): a *lowered*
  candidate. Its timed call does everything a user would: quantise A and B (fused amax, scale
  and cast kernels, ``kernel_templates/gemm/fp8_quant.py``; per-row/per-column or per-tensor
  scales, ``SCALES``), the fp8 product, the dequantised output in the problem's dtype. Its
  configuration says so (``PRECISION``), and its error is judged against the policy's bound
  (``search.decision.policy.Policy.judge``), not the input precision's tolerance.

A configuration is a plain dict; every one this module emits is complete (``complete``)::

    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8,
     "num_stages": 3, "PERSISTENT": 0, "num_ctas": 1, "FAST_ACC": 0, "TMA_STORE": 0}

plus, for a lowered candidate, ``PRECISION``, ``SCALES``, the quantisation's ``Q_MODE`` and its
kernels' tiles ``Q_BLOCK_R``, ``Q_BLOCK_K``, ``Q_WARPS`` (searched like the product's).
``Q_MODE`` is ``"two_pass"`` (an amax launch then a cast launch per operand, over
``Q_BLOCK_R x Q_BLOCK_K`` tiles; per row or per tensor; a configuration without the key means
it) or ``"panel"`` (one launch for both operands, each program quantising panels of
``Q_BLOCK_R`` whole rows, walking K in ``Q_BLOCK_K`` chunks twice, so each operand is read from
DRAM about once; per row only: ``SCALES="tensor"`` with it is a violation and the template
refuses it). The search and the seeds quantise in two passes: panels measured slower on an
H100 at every tile tried (``python -m scripts.bench quant``;
``docs/benchmarks/precision_quant_h100_2026-11-25.md``), so ``"panel"`` is a mode a
configuration may pin, not a searched dimension.
"""

from __future__ import annotations

from typing import Any

from search.decision.evidence import TierPlan
from search.kinds.gemm.cluster import cluster_violations, fp8_cluster_refusal
from search.kinds.gemm.spec import DTYPE_BYTES, GemmProblem
from search.limits import DeviceLimits
from search.optimizer import Choice

__all__ = ["CUBLAS_PRODUCT_KEYS", "DEFAULTS", "LOWERED", "LOWERED_DEFAULTS", "PARAMS",
           "PRODUCTS", "Q_MODES", "Q_PARAMS", "SCALES", "SCALE_GROUP", "TIER", "TIER_WEIGHT",
           "block_refusal", "block_tile_refusal", "complete", "lowered", "params",
           "product_refusal", "q_mode_refusal", "seeds", "space", "tier_plan", "violations"]

#: The tier's name (its trials run on the ``triton`` backend).
TIER = "fp8"
#: Its weight in the custom budget: the only tier of an fp8 problem, the last of a bf16 one.
TIER_WEIGHT = 3.0
#: The precision a lowered candidate computes in (``policy.allow`` names it).
LOWERED = "fp8_e4m3"
#: Input dtypes a lowered candidate quantises.
LOWERED_FROM = ("bf16", "fp16")
#: How a lowered candidate scales its fp8 copies: per row of A and column of B, per tensor, or
#: in blocks (A per row and 128 of K, B per 128 x 128 block; applied per K tile of the
#: product, so ``BLOCK_K`` is 128 and ``BLOCK_N`` at most 128: ``block_refusal``).
SCALES = ("row", "tensor", "block")
#: K elements sharing a scale, and B's block columns, under ``SCALES="block"``.
SCALE_GROUP = 128
#: How the operands are quantised (``kernel_templates.gemm.fp8_quant``): ``"panel"`` is per
#: row only.
Q_MODES = ("panel", "two_pass", "whole_rows")
#: The modes the search tries (panels measured slower: a mode a configuration may pin).
SEARCHED_Q_MODES = ("two_pass", "whole_rows")

PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "PERSISTENT",
          "num_ctas", "FAST_ACC", "TMA_STORE")
#: The quantisation's keys (lowered candidates only).
Q_PARAMS = ("PRODUCT", "SCALES", "Q_MODE", "Q_BLOCK_R", "Q_BLOCK_K", "Q_WARPS")
#: Keys beyond ``PARAMS`` and the value each takes when absent.
DEFAULTS: dict[str, Any] = {"PERSISTENT": 0, "num_ctas": 1, "FAST_ACC": 0, "TMA_STORE": 0}
#: What multiplies a lowered candidate's fp8 copies: this template, or cuBLAS's
#: blockwise-scaled fp8 kernel (``torch._scaled_mm`` with 1 x 128 and 128 x 128 scales) on the
#: block-scaled copies the template's quantisation made.
PRODUCTS = ("triton", "cublas")
#: The template keys a cuBLAS product does not use, at one value each (so that configurations
#: differing only there are one configuration): each dimension's first value, which every
#: problem's space holds.
CUBLAS_PRODUCT_KEYS: dict[str, Any] = {
    "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4,
    "num_stages": 2, "PERSISTENT": 0, "num_ctas": 1, "FAST_ACC": 0, "TMA_STORE": 0,
    "SCALES": "block", "Q_MODE": "two_pass"}
LOWERED_DEFAULTS: dict[str, Any] = {"PRECISION": LOWERED, "PRODUCT": "triton", "SCALES": "row",
                                    "Q_MODE": "two_pass",
                                    "Q_BLOCK_R": 32, "Q_BLOCK_K": 128, "Q_WARPS": 4}
#: Elements one quantisation program holds per step (fp32 registers: at 4 warps, 64 each).
Q_MAX_TILE = 8192


def lowered(problem: GemmProblem) -> bool:
    """Whether the tier's candidates quantise ``problem``'s operands (a bf16/fp16 problem)
    rather than multiply fp8 inputs (an fp8 problem)."""
    return not problem.scaled


def complete(config: dict[str, Any], is_lowered: bool) -> dict[str, Any]:
    """``config`` with every key of the template, absent ones at their defaults (the lowered
    keys only for a lowered candidate); given values are kept (the template validates them),
    except the two that block scales ignore: ``Q_BLOCK_K`` (the group is ``SCALE_GROUP``) and
    ``FAST_ACC`` (each K tile's sums are promoted when scaled), set to ``SCALE_GROUP`` and 0,
    and, for a cuBLAS product, the template's keys (``CUBLAS_PRODUCT_KEYS``), so that
    configurations differing only there are one configuration."""
    base = {**DEFAULTS, **(LOWERED_DEFAULTS if is_lowered else {})}
    out = {**base, **config}
    if is_lowered and out.get("PRODUCT") == "cublas":
        out.update(CUBLAS_PRODUCT_KEYS)
    if is_lowered and out.get("SCALES") == "block":
        out.update(Q_BLOCK_K=SCALE_GROUP, FAST_ACC=0)
    return out


def block_refusal(config: dict[str, Any]) -> str | None:
    """Why a lowered ``config`` cannot use block scales (``None``: it can, or it does not use
    them): the product applies one group's scales per K tile and one block of B's per output
    tile, and block scales are quantised in their own one-pass launches."""
    if config.get("SCALES") != "block":
        return None
    if config.get("PRODUCT") != "cublas":  # cuBLAS's product runs no template tile
        why = block_tile_refusal(config["BLOCK_K"], config["BLOCK_N"])
        if why:
            return why
    if config.get("Q_MODE", "two_pass") != "two_pass":
        return (f"SCALES='block' quantises in its own one-pass launches; "
                f"Q_MODE={config['Q_MODE']!r} is for per-row scales")
    return None


def block_tile_refusal(block_k: int, block_n: int) -> str | None:
    """Why the template's tile cannot apply block scales (``None``: it can): one scale group
    per K tile and one block of B's per output tile."""
    if block_k != SCALE_GROUP or SCALE_GROUP % block_n:
        return (f"SCALES='block' needs BLOCK_K={SCALE_GROUP} (one scale group per K tile) and "
                f"a BLOCK_N dividing {SCALE_GROUP} (one block of B's per tile), got "
                f"BLOCK_K={block_k}, BLOCK_N={block_n}")
    return None


def params(problem: GemmProblem) -> tuple[str, ...]:
    """The keys the tier searches for ``problem``."""
    return (*PARAMS, *Q_PARAMS) if lowered(problem) else PARAMS


def _up_to(values: tuple[int, ...], size: int) -> tuple[int, ...]:
    bound = 1 << max(0, size - 1).bit_length()
    return tuple(v for v in values if v <= bound) or values[:1]


def space(problem: GemmProblem) -> tuple[Choice, ...]:
    """The dimensions for ``problem``: tiles no larger than the problem (BLOCK_K at least 32,
    the fp8 wgmma's K), persistence, 2-CTA clusters, the accumulation (``FAST_ACC``: 0 promotes
    the tensor cores' partial sums into fp32 once per BLOCK_K, 1 keeps them in the tensor
    cores throughout, as ``torch._scaled_mm(use_fast_accum=True)``), the output through TMA or
    pointers and, lowered, the quantisation's scales and tiles."""
    dims = [
        Choice("BLOCK_M", _up_to((16, 32, 64, 128, 256), problem.m)),
        Choice("BLOCK_N", _up_to((32, 64, 128, 256), problem.n)),
        Choice("BLOCK_K", _up_to((32, 64, 128, 256), problem.k)),
        Choice("GROUP_M", (1, 4, 8, 16)),
        Choice("num_warps", (4, 8)),
        Choice("num_stages", (2, 3, 4, 5, 6)),
        Choice("PERSISTENT", (0, 1)),
        Choice("num_ctas", (1, 2)),
        Choice("FAST_ACC", (0, 1)),
        Choice("TMA_STORE", (0, 1)),
    ]
    if lowered(problem):
        dims += [Choice("PRODUCT", PRODUCTS),  # type: ignore[arg-type]
                 Choice("SCALES", SCALES),  # type: ignore[arg-type]
                 Choice("Q_MODE", SEARCHED_Q_MODES),  # type: ignore[arg-type]
                 Choice("Q_BLOCK_R", (8, 16, 32, 64, 128)),
                 Choice("Q_BLOCK_K", (32, 64, 128, 256, 512)),
                 Choice("Q_WARPS", (2, 4, 8))]
    return tuple(dims)


def smem_bytes(config: dict[str, Any]) -> int:
    """Shared memory of the pipeline: ``num_stages`` one-byte A and B tiles."""
    return config["num_stages"] * (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"]


def violations(problem: GemmProblem, config: dict[str, Any], limits: DeviceLimits) -> list[str]:
    """Every rule ``config`` breaks for ``problem`` under ``limits`` (empty: feasible). A
    cuBLAS product runs no template tile: only its own rule and the quantisation's apply."""
    if lowered(problem) and config.get("PRODUCT") == "cublas":
        return _quantisation_violations(problem, config, limits)
    out: list[str] = []
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    for name, size, floor in (("BLOCK_M", problem.m, 16), ("BLOCK_N", problem.n, 32),
                              ("BLOCK_K", problem.k, 32)):
        value = config[name]
        if value > floor and value >= 2 * (1 << max(0, size - 1).bit_length()):
            out.append(f"{name}={value} is over twice {name[-1].lower()}={size} rounded up to "
                       "a power of two")
    smem = smem_bytes(config)
    if smem > limits.smem_per_block:
        out.append(f"shared memory {smem} B for {config['num_stages']} stages is over the "
                   f"device limit {limits.smem_per_block} B")
    threads = 32 * config["num_warps"]
    # FAST_ACC=0 keeps a second accumulator for the tensor cores' partial sums.
    acc = bm * bn * (1 if config.get("FAST_ACC", 0) else 2) // threads
    if acc > 256:
        out.append(f"accumulators {bm}x{bn}{'' if config.get('FAST_ACC', 0) else ' (x2)'} "
                   f"need {acc} fp32 registers per thread with num_warps={config['num_warps']} "
                   "(limit 256)")
    if bm * bn < 4 * threads:
        out.append(f"tile {bm}x{bn} is too small for {config['num_warps']} warps")
    # the A the template loads through TMA (an fp8 problem's, or the quantised copy of a
    # lowered one) is row-major whatever the problem's layout: clusters are allowed
    # (tests/gpu/test_clusters.py checks them)
    out += cluster_violations(problem, config, tma_a=False)
    why = fp8_cluster_refusal(config, row_scales=lowered(problem)
                              and config.get("SCALES", "row") == "row")
    if why:
        out.append(why)
    row_bytes = problem.n * DTYPE_BYTES[problem.out_dtype or "bf16"]
    if config.get("TMA_STORE", 0) and row_bytes % 16:
        out.append(f"TMA_STORE=1 needs 16-byte output rows; n={problem.n} gives {row_bytes} B")
    if lowered(problem):
        out += _quantisation_violations(problem, config, limits)
    return out


def _quantisation_violations(problem: GemmProblem, config: dict[str, Any],
                             limits: DeviceLimits) -> list[str]:
    """The rules of a lowered ``config``'s quantisation and product choice."""
    out = [why for why in (q_mode_refusal(config), block_refusal(config),
                           product_refusal(problem, config, limits)) if why]
    tile = config["Q_BLOCK_R"] * config["Q_BLOCK_K"]
    if tile > Q_MAX_TILE:
        out.append(f"quantisation tile {config['Q_BLOCK_R']}x{config['Q_BLOCK_K']} is over "
                   f"{Q_MAX_TILE} elements")
    if config["Q_BLOCK_K"] >= 2 * (1 << max(0, problem.k - 1).bit_length()) \
            and config["Q_BLOCK_K"] > 128:
        out.append(f"Q_BLOCK_K={config['Q_BLOCK_K']} is over twice k={problem.k} rounded up "
                   "to a power of two")
    return out


def product_refusal(problem: GemmProblem, config: dict[str, Any], limits: DeviceLimits
                    ) -> str | None:
    """Why a lowered ``config``'s product cannot run for ``problem`` on a device of
    ``limits`` (``None``: it can). cuBLAS's blockwise-scaled fp8 kernel runs on CUDA sm_90
    (not the interpreter) and takes K and N in multiples of 16."""
    if config.get("PRODUCT", "triton") != "cublas":
        return None
    major = limits.cc.split(".")[0]
    if limits.interpreted or (major.isdigit() and int(major) < 9):
        return ("PRODUCT='cublas' (cuBLAS's blockwise-scaled fp8 product) needs a CUDA sm_90 "
                f"device, not {'the interpreter' if limits.interpreted else 'cc ' + limits.cc}")
    if problem.k % 16 or problem.n % 16:
        return (f"PRODUCT='cublas' needs k and n in multiples of 16 (torch._scaled_mm), got "
                f"k={problem.k}, n={problem.n}")
    return None


def q_mode_refusal(config: dict[str, Any]) -> str | None:
    """Why a lowered ``config``'s quantisation mode cannot serve its scales (``None``: it
    can): panels reduce each row's amax in one program, so they make per-row scales only."""
    mode = config.get("Q_MODE", "two_pass")
    if mode in ("panel", "whole_rows") and config.get("SCALES", "row") != "row":
        return (f"Q_MODE={mode!r} quantises per row; SCALES={config.get('SCALES')!r} needs "
                "Q_MODE='two_pass'")
    return None


def tier_plan(problem: GemmProblem, *, mode: str, cc: str, allowed: dict[str, float]
              ) -> TierPlan:
    """Whether the tier applies to ``problem`` on this device under a policy allowing
    ``allowed`` (precision -> the largest relative error), and why."""
    device_ok = mode == "interpreter" or (mode == "cuda" and cc.split(".")[0].isdigit()
                                          and int(cc.split(".")[0]) >= 9)
    why_device = f"needs sm_90 (TMA, fp8 wgmma); this device is {mode} cc {cc or '?'}"
    if problem.scaled:
        if not device_ok:
            return TierPlan(TIER, TIER_WEIGHT, False, why_device)
        return TierPlan(TIER, TIER_WEIGHT, True, "fp8 inputs: the Triton fp8 template")
    if LOWERED not in allowed:
        return TierPlan(TIER, TIER_WEIGHT, False,
                        f"the job's policy allows no {LOWERED} computation")
    why_not = lowering_refusal(problem)
    if why_not:
        return TierPlan(TIER, TIER_WEIGHT, False, why_not)
    if not device_ok:
        return TierPlan(TIER, TIER_WEIGHT, False, why_device)
    return TierPlan(TIER, TIER_WEIGHT, True,
                    f"{LOWERED} allowed by the policy up to a relative error of "
                    f"{allowed[LOWERED]:.3g}: quantised {problem.dtype} inputs, an fp8 product, "
                    f"a {problem.out_dtype} output, timed together", precision=LOWERED)


def lowering_refusal(problem: GemmProblem) -> str | None:
    """Why no backend computes ``problem`` in fp8 e4m3 (``None``: the fp8 tier can)."""
    if problem.scaled:
        return f"{LOWERED} is this problem's input precision, always allowed"
    if problem.dtype not in LOWERED_FROM:
        return (f"{problem.dtype} inputs are not quantised to {LOWERED} (only "
                f"{', '.join(LOWERED_FROM)})")
    if problem.batch != 1:
        return f"{LOWERED} computation serves batch 1 only, got batch {problem.batch}"
    if problem.out_dtype not in ("bf16", "fp16", "fp32"):
        return f"{LOWERED} computation writes bf16, fp16 or fp32, not {problem.out_dtype}"
    return None


_BIG = [
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4),
    dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4),
]
_SMALL = [
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=4),
    dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=4),
    dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=3),
]


#: Tiles of the block-scaled lowered seeds (``BLOCK_K`` the scale group, ``BLOCK_N`` at most
#: one block of B's), large shapes first.
_BLOCK_BIG = [
    dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4),
]
_BLOCK_SMALL = [
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=4),
]


def seeds(problem: GemmProblem) -> list[dict[str, Any]]:
    """Starting points (the Triton tutorials' fp8 tiles: 128x256x128 with 8 warps for large
    shapes, smaller tiles for small ones), each with fp32 accumulation and with the tensor
    cores' fast accumulation, tiled and persistent. A lowered problem starts with cuBLAS's
    blockwise product on block-scaled copies (two quantisation tiles), then the first eight
    of those with whole-row quantisation, the template's block scales on two tiles, and the
    rest quantised in two passes. Complete configurations within the space."""
    big = problem.m * problem.n >= 132 * 128 * 128
    ordered = _BIG + _SMALL if big else _SMALL + _BIG
    out: list[dict[str, Any]] = []
    for base in ordered:
        for extra in (dict(PERSISTENT=0, FAST_ACC=0), dict(PERSISTENT=1, FAST_ACC=1, TMA_STORE=1),
                      dict(PERSISTENT=1, FAST_ACC=0, TMA_STORE=1), dict(PERSISTENT=0, FAST_ACC=1)):
            out.append({**base, **extra})
    if lowered(problem):
        # block scales multiplied by cuBLAS first, then whole rows (the operand with
        # contiguous rows read once), then the template's block scales
        cublas = [{**CUBLAS_PRODUCT_KEYS, "PRODUCT": "cublas", "Q_BLOCK_R": r, "Q_WARPS": w}
                  for r, w in ((32, 4), (64, 8))]
        out = (cublas + [{**s, "Q_MODE": "whole_rows"} for s in out[:8]]
               + [{**base, "PERSISTENT": 1, "TMA_STORE": 1, "SCALES": "block"}
                  for base in (_BLOCK_BIG if big else _BLOCK_SMALL)[:2]]
               + out)
    legal = {c.name: set(c.values) for c in space(problem)}
    is_lowered = lowered(problem)
    done = [complete(s, is_lowered) for s in out]
    fits = DeviceLimits()  # an H100's: the seeds are what fits there
    return [s for s in done if all(s[p] in legal[p] for p in params(problem))
            and not violations(problem, s, fits)][:12]
