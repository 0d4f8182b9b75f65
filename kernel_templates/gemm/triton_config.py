"""The tiled Triton GEMM template's configuration: its keys and the check that completes and
validates one before anything compiles (``check_config``)."""

from __future__ import annotations

from typing import Any

from kernel_templates.configs import check_keys, check_powers_of_two
from kernel_templates.errors import InvalidConfig
from search.kinds.gemm.triton_space import SPLITK_MODES, complete

__all__ = ["CONFIG_KEYS", "INPUT_PRECISIONS", "LOADS", "OPTIONAL_KEYS", "check_config"]

CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "num_warps", "num_stages")
#: Keys a configuration may omit: ``check_config`` fills in their defaults.
OPTIONAL_KEYS = ("PERSISTENT", "WARP_SPECIALIZE", "num_ctas", "INPUT_PRECISION", "SPLITK_MODE",
                 "FANIN", "LOADS", "FLATTEN", "TMA_STORE", "WS_LOOP")
#: ``LOADS`` values.
LOADS = ("auto", "tma", "pointer")
#: ``INPUT_PRECISION`` values (``tl.dot``'s ``input_precision`` for fp32 inputs).
INPUT_PRECISIONS = ("ieee", "tf32", "tf32x3")



def _flag(config: dict[str, Any], key: str, allowed: tuple[int, ...]) -> int:
    """``config[key]`` as an int among ``allowed`` (bools count as 0/1), else InvalidConfig."""
    v = config[key]
    try:
        iv = int(v)
    except (TypeError, ValueError):
        iv = None
    if iv is None or iv != v or iv not in allowed:
        raise InvalidConfig(f"{key} must be one of {list(allowed)}, got {v!r}")
    return iv


def _choice(config: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    """``config[key]`` if among ``allowed``, else InvalidConfig."""
    v = config[key]
    if v not in allowed:
        raise InvalidConfig(f"{key} must be one of {list(allowed)}, got {v!r}")
    return v


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` complete (every optional key, absent ones at their defaults:
    ``search.kinds.gemm.triton_space.complete``) with ints as ints, or ``InvalidConfig`` when a
    required key is missing, a key is unknown or a value cannot run. Rules that need the
    operands (dtype, device, alignment) are checked by ``matmul``."""
    check_keys(config, CONFIG_KEYS, OPTIONAL_KEYS)
    cfg: dict[str, Any] = {k: int(config[k]) for k in CONFIG_KEYS}
    check_powers_of_two(cfg, ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps"))
    if cfg["BLOCK_K"] < 16 or cfg["BLOCK_M"] < 16 or cfg["BLOCK_N"] < 16:
        raise InvalidConfig("tl.dot needs BLOCK_M, BLOCK_N and BLOCK_K of at least 16")
    if cfg["GROUP_M"] < 1 or cfg["num_stages"] < 1:
        raise InvalidConfig("GROUP_M and num_stages must be positive")
    full = complete({**config, **cfg})
    for k in ("PERSISTENT", "WARP_SPECIALIZE", "FLATTEN", "TMA_STORE"):
        cfg[k] = _flag(full, k, (0, 1))
    cfg["num_ctas"] = _flag(full, "num_ctas", (1, 2))
    cfg["INPUT_PRECISION"] = _choice(full, "INPUT_PRECISION", INPUT_PRECISIONS)
    cfg["SPLITK_MODE"] = _choice(full, "SPLITK_MODE", SPLITK_MODES)
    cfg["LOADS"] = _choice(full, "LOADS", LOADS)
    cfg["WS_LOOP"] = _choice(full, "WS_LOOP", ("k", "tiles"))
    serial = cfg["SPLITK_MODE"] == "serial" and cfg["SPLIT_K"] > 1
    cfg["FANIN"] = _flag(full, "FANIN", tuple(1 << i for i in range(cfg["SPLIT_K"].bit_length()))
                         if serial else (1,))
    if cfg["PERSISTENT"] and cfg["SPLIT_K"] != 1:
        raise InvalidConfig(f"PERSISTENT=1 needs SPLIT_K=1, got SPLIT_K={cfg['SPLIT_K']}")
    if cfg["num_ctas"] > 1 and cfg["SPLIT_K"] != 1:
        # The serial split-K reduction counts arrivals once per program with one CTA's barrier.
        raise InvalidConfig(f"num_ctas={cfg['num_ctas']} needs SPLIT_K=1, got "
                            f"SPLIT_K={cfg['SPLIT_K']}")
    return cfg
