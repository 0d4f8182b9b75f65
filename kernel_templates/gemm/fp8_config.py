"""The Triton fp8 GEMM template's configuration: its keys and the check that completes and
validates one before anything compiles (``check_config``). The keys and their defaults are the
search space's (``search.kinds.gemm.fp8_space``)."""

from __future__ import annotations

from typing import Any

from kernel_templates.configs import check_keys, check_powers_of_two
from kernel_templates.errors import InvalidConfig
from search.kinds.gemm.cluster import fp8_cluster_refusal
from search.kinds.gemm.fp8_space import (
    DEFAULTS,
    LOWERED,
    LOWERED_DEFAULTS,
    PRODUCTS,
    Q_MODES,
    SCALES,
    block_refusal,
    complete,
    q_mode_refusal,
)

__all__ = ["CONFIG_KEYS", "LOWERED_KEYS", "OPTIONAL_KEYS", "check_config", "is_lowered"]

CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
OPTIONAL_KEYS = tuple(DEFAULTS)
#: Keys of a lowered candidate (a bf16/fp16 problem computed in fp8).
LOWERED_KEYS = tuple(LOWERED_DEFAULTS)


def is_lowered(config: dict[str, Any]) -> bool:
    """Whether ``config`` is a lowered candidate's: it names the precision it computes in."""
    return "PRECISION" in config


def _int_in(cfg: dict[str, Any], key: str, allowed: tuple[int, ...]) -> int:
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or v not in allowed:
        raise InvalidConfig(f"{key} must be one of {list(allowed)}, got {v!r}")
    return v


def check_config(config: dict[str, Any], lowered: bool) -> dict[str, Any]:
    """``config`` complete (absent optional keys at their defaults) with ints as ints, or
    ``InvalidConfig``. ``lowered``: the problem is bf16/fp16 and the candidate quantises it,
    so the quantisation keys are allowed and ``PRECISION`` must be ``fp8_e4m3``."""
    optional = (*OPTIONAL_KEYS, *(LOWERED_KEYS if lowered else ()))
    check_keys(config, CONFIG_KEYS, optional)
    try:
        cfg: dict[str, Any] = {k: int(config[k]) for k in CONFIG_KEYS}
    except (TypeError, ValueError) as exc:
        raise InvalidConfig(f"tile sizes, num_warps and num_stages must be integers: {exc}"
                            ) from None
    check_powers_of_two(cfg, ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"))
    if cfg["BLOCK_M"] < 16 or cfg["BLOCK_N"] < 16 or cfg["BLOCK_K"] < 32:
        raise InvalidConfig("the fp8 dot needs BLOCK_M and BLOCK_N of at least 16 and BLOCK_K "
                            "of at least 32")
    if cfg["GROUP_M"] < 1 or cfg["num_stages"] < 1:
        raise InvalidConfig("GROUP_M and num_stages must be positive")
    full = complete({**config, **cfg}, lowered)
    for key in ("PERSISTENT", "FAST_ACC", "TMA_STORE"):
        cfg[key] = _int_in(full, key, (0, 1))
    cfg["num_ctas"] = _int_in(full, "num_ctas", (1, 2))
    if not lowered:
        _check_cluster(cfg, row_scales=False)
        return cfg
    if full["PRECISION"] != LOWERED:
        raise InvalidConfig(f"PRECISION must be {LOWERED!r}, got {full['PRECISION']!r}")
    if full["SCALES"] not in SCALES:
        raise InvalidConfig(f"SCALES must be one of {list(SCALES)}, got {full['SCALES']!r}")
    cfg["PRECISION"], cfg["SCALES"] = full["PRECISION"], full["SCALES"]
    if full["PRODUCT"] not in PRODUCTS:
        raise InvalidConfig(f"PRODUCT must be one of {list(PRODUCTS)}, got {full['PRODUCT']!r}")
    cfg["PRODUCT"] = full["PRODUCT"]
    if full["Q_MODE"] not in Q_MODES:
        raise InvalidConfig(f"Q_MODE must be one of {list(Q_MODES)}, got {full['Q_MODE']!r}")
    for why in (q_mode_refusal(full), block_refusal({**full, **cfg})):
        if why:
            raise InvalidConfig(why)
    cfg["Q_MODE"] = full["Q_MODE"]
    for key in ("Q_BLOCK_R", "Q_BLOCK_K", "Q_WARPS"):
        v = full[key]
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v & (v - 1):
            raise InvalidConfig(f"{key} must be a positive power of two, got {v!r}")
        cfg[key] = v
    if cfg["Q_BLOCK_K"] < 16:
        raise InvalidConfig(f"Q_BLOCK_K must be at least 16, got {cfg['Q_BLOCK_K']}")
    _check_cluster(cfg, row_scales=cfg["SCALES"] == "row")
    return cfg


def _check_cluster(cfg: dict[str, Any], row_scales: bool) -> None:
    why = fp8_cluster_refusal(cfg, row_scales)
    if why:
        raise InvalidConfig(why)
