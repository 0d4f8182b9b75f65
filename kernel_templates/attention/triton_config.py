"""The configurations of the Triton attention templates: their keys, the checks that complete
and validate one before anything compiles (``check_flash_config``, ``check_decode_config``)
and the static rules a config must meet on a device (``flash_violations``,
``decode_violations``: shared memory, registers, tile shapes), so an impossible config is
never compiled.

Flash-attention forward (``triton.py``)::

    BLOCK_M     16..256, power of two: query rows per program
    BLOCK_N     16..256, power of two: keys per step of the inner loop
    num_warps   1, 2, 4, 8 or 16
    num_stages  1..6: software-pipelining depth of the K/V loads
    TMA         optional 0/1 (default 0): tensor-descriptor (TMA) loads and stores; needs
                s_q % BLOCK_M == 0, s_kv % BLOCK_N == 0 and a CUDA device
    WS          optional 0/1 (default 0): warp-specialised key loop (CUDA)
    PERSISTENT  optional 0/1 (default 0): one program per SM walking the tiles

Split-KV decode (``decode.py``; problems with ``s_q <= DECODE_MAX_SQ``)::

    NUM_SPLITS  1..MAX_SPLITS: programs sharing one key/value head's sequence
    BLOCK_N     16..256, power of two
    num_warps   1, 2, 4, 8 or 16
    num_stages  optional, 1..6 (default 2)
"""

from __future__ import annotations

from typing import Any

from kernel_templates.configs import check_keys
from kernel_templates.errors import InvalidConfig
from search.kinds.attention.spec import AttentionProblem

__all__ = ["DECODE_KEYS", "DECODE_MAX_SQ", "DECODE_OPTIONAL", "FLASH_KEYS", "FLASH_OPTIONAL",
           "MAX_SPLITS",
           "check_decode_config", "check_flash_config", "decode_block_m", "decode_violations",
           "flash_violations"]

FLASH_KEYS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
#: Optional flash keys (the Hopper options) and their defaults.
FLASH_OPTIONAL: dict[str, int] = {"TMA": 0, "WS": 0, "PERSISTENT": 0}
DECODE_KEYS = ("NUM_SPLITS", "BLOCK_N", "num_warps")
#: Optional decode keys and their defaults.
DECODE_OPTIONAL: dict[str, int] = {"num_stages": 2}
#: The longest query the decode template takes (its rows are packed into one tile).
DECODE_MAX_SQ = 16
MAX_SPLITS = 256
_BLOCKS = (16, 32, 64, 128, 256)
_WARPS = (1, 2, 4, 8, 16)
_STAGES = range(1, 7)


def _int(config: dict[str, Any], key: str, allowed: Any) -> int:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise InvalidConfig(f"{key} must be one of {list(allowed)}, got {value!r}")
    return value


def _complete(config: dict[str, Any], keys: tuple[str, ...], optional: dict[str, int]
              ) -> dict[str, Any]:
    check_keys(config, keys, optional)
    return {**optional, **config}


def check_flash_config(config: dict[str, Any], problem: AttentionProblem | None = None
                       ) -> dict[str, int]:
    """``config`` complete (the Hopper options defaulted to 0) as ints, or ``InvalidConfig``
    naming the missing, unknown or bad key; with ``problem``, also the rule ``TMA`` puts on
    the sequence lengths."""
    cfg = _complete(dict(config), FLASH_KEYS, FLASH_OPTIONAL)
    out = {"BLOCK_M": _int(cfg, "BLOCK_M", _BLOCKS), "BLOCK_N": _int(cfg, "BLOCK_N", _BLOCKS),
           "num_warps": _int(cfg, "num_warps", _WARPS),
           "num_stages": _int(cfg, "num_stages", _STAGES),
           **{k: _int(cfg, k, (0, 1)) for k in FLASH_OPTIONAL}}
    if problem is not None and out["TMA"]:
        from search.kinds.attention.constraints import tma_tiling

        reason = tma_tiling(problem, out["BLOCK_M"], out["BLOCK_N"])
        if reason:
            raise InvalidConfig(reason)
    return out


def check_decode_config(config: dict[str, Any]) -> dict[str, int]:
    """``config`` complete (``num_stages`` defaulted) as ints, or ``InvalidConfig``."""
    cfg = _complete(dict(config), DECODE_KEYS, DECODE_OPTIONAL)
    return {"NUM_SPLITS": _int(cfg, "NUM_SPLITS", range(1, MAX_SPLITS + 1)),
            "BLOCK_N": _int(cfg, "BLOCK_N", _BLOCKS),
            "num_warps": _int(cfg, "num_warps", _WARPS),
            "num_stages": _int(cfg, "num_stages", _STAGES)}


def decode_block_m(problem: AttentionProblem) -> int:
    """Rows of the decode template's tile: one key/value head's query heads times ``s_q``,
    rounded up to a power of two of at least 16 (``tl.dot``'s minimum)."""
    rows = problem.group * problem.s_q
    return max(16, 1 << (rows - 1).bit_length())


def _rules(problem: AttentionProblem, config: dict[str, Any], tier: str, mode: str,
           smem_per_block: int) -> list[str]:
    """The search's static rules (``search.kinds.attention.constraints``), one source for both
    sides, under the limits of a device of ``mode`` with ``smem_per_block`` bytes."""
    from search.kinds.attention.constraints import violations
    from search.limits import limits_for

    return violations(problem, config, tier, limits_for(mode, smem_per_block), mode=mode)


def flash_violations(problem: AttentionProblem, config: dict[str, Any], mode: str,
                     smem_per_block: int) -> list[str]:
    """The rules the flash template's ``config`` breaks for ``problem`` on a device of ``mode``
    with ``smem_per_block`` bytes."""
    try:
        cfg = check_flash_config(config, problem)
    except InvalidConfig as exc:
        return [str(exc)]
    return _rules(problem, cfg, "flash", mode, smem_per_block)


def decode_violations(problem: AttentionProblem, config: dict[str, Any], mode: str,
                      smem_per_block: int) -> list[str]:
    """The rules the decode template's ``config`` breaks for ``problem`` on a device."""
    if problem.s_q > DECODE_MAX_SQ:
        return [f"the decode template takes s_q <= {DECODE_MAX_SQ}, got {problem.s_q}"]
    try:
        cfg = check_decode_config(config)
    except InvalidConfig as exc:
        return [str(exc)]
    reasons = _rules(problem, cfg, "decode", mode, smem_per_block)
    blocks = -(-problem.s_kv // cfg["BLOCK_N"])
    if cfg["NUM_SPLITS"] > blocks:
        reasons.append(f"NUM_SPLITS={cfg['NUM_SPLITS']} exceeds the {blocks} key blocks of "
                       f"BLOCK_N={cfg['BLOCK_N']}: some splits would get no key")
    return reasons
