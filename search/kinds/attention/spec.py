"""The attention (forward) problem: its spec, validation with field-named errors, key, FLOPs
and bytes.

``O = softmax(scale * Q K^T + mask) V`` with Q ``[batch, heads, s_q, d]`` and K, V
``[batch, kv_heads, s_kv, d]`` (layout ``[batch, heads, seq, d]``, contiguous). Fewer key/value
heads than query heads is grouped-query attention (one key/value head serves
``heads // kv_heads`` query heads; MQA when ``kv_heads == 1``). ``causal`` masks key ``j`` for
query ``i`` when ``j > i + (s_kv - s_q)``: the mask is aligned bottom-right, as FlashAttention
and PyTorch's ``is_causal`` with ``s_q != s_kv`` (through the backends that accept it) do, so
the last query sees every key. The softmax statistics are fp32 whatever the dtype.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from search.types import ProblemError

__all__ = ["DTYPE_BYTES", "HEAD_DIMS", "MAX_SEQ", "AttentionProblem", "kept_pairs"]

#: Element sizes of the dtypes an attention problem may name.
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}
#: Head dimensions served (the Triton template and the fused SDPA backends take these).
HEAD_DIMS = (16, 32, 64, 128, 256)
#: The longest sequence a problem may name (a 32-bit index over ``batch * heads * seq``).
MAX_SEQ = 1 << 20
_MAX_COUNT = 1 << 16


def kept_pairs(s_q: int, s_kv: int, causal: bool) -> int:
    """How many (query, key) pairs the mask keeps: every one, or with the bottom-right causal
    mask, ``sum over i of clamp(i + s_kv - s_q + 1, 0, s_kv)``."""
    if not causal:
        return s_q * s_kv
    offset = s_kv - s_q
    first = max(0, -offset)  # queries before this see no key at all
    total = 0
    # rows first..last see min(i + offset + 1, s_kv) keys: a ramp, then a plateau at s_kv
    ramp_end = min(s_q, s_kv - offset)  # rows with i + offset + 1 <= s_kv
    if ramp_end > first:
        lo, hi = first + offset + 1, ramp_end - 1 + offset + 1
        total += (lo + hi) * (ramp_end - first) // 2
    if s_q > max(ramp_end, first):
        total += (s_q - max(ramp_end, first)) * s_kv
    return total


@dataclass(frozen=True)
class AttentionProblem:
    """Attention forward: ``heads`` query heads over ``kv_heads`` key/value heads."""

    batch: int = field(metadata={"help": "independent sequences", "max": _MAX_COUNT})
    heads: int = field(metadata={"help": "query heads", "max": _MAX_COUNT})
    s_q: int = field(metadata={"help": "query length", "max": MAX_SEQ})
    s_kv: int = field(metadata={"help": "key/value length", "max": MAX_SEQ})
    d: int = field(metadata={"help": f"head dimension: {', '.join(map(str, HEAD_DIMS))}",
                             "choices": HEAD_DIMS})
    kv_heads: int | None = field(default=None, metadata={
        "help": "key/value heads (fewer than heads: grouped-query; default: heads)",
        "max": _MAX_COUNT})
    causal: bool = field(default=False, metadata={
        "help": "causal mask (aligned bottom-right when s_q != s_kv)"})
    dtype: str = field(default="bf16", metadata={"help": "bf16, fp16 or fp32",
                                                  "choices": tuple(DTYPE_BYTES)})
    scale: float | None = field(default=None, metadata={
        "help": "softmax scale (default: 1/sqrt(d))"})
    kind: str = field(default="attention", init=False)

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        for name, top in (("batch", _MAX_COUNT), ("heads", _MAX_COUNT),
                          ("kv_heads", _MAX_COUNT), ("s_q", MAX_SEQ), ("s_kv", MAX_SEQ),
                          ("d", max(HEAD_DIMS))):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ProblemError(name, f"must be an integer, got {value!r}")
            if not 0 < value <= top:
                raise ProblemError(name, f"must be in 1..{top}, got {value}")
        if self.d not in HEAD_DIMS:
            raise ProblemError("d", f"head dimension {self.d} is not served; one of "
                                    f"{', '.join(map(str, HEAD_DIMS))}")
        if self.heads % self.kv_heads:
            raise ProblemError("kv_heads", f"heads ({self.heads}) must be a multiple of "
                                           f"kv_heads ({self.kv_heads})")
        if not isinstance(self.causal, bool):
            raise ProblemError("causal", f"must be true or false, got {self.causal!r}")
        if self.dtype not in DTYPE_BYTES:
            raise ProblemError("dtype", f"unknown dtype {self.dtype!r}; one of "
                                        f"{sorted(DTYPE_BYTES)}")
        if self.scale is None:
            object.__setattr__(self, "scale", 1.0 / math.sqrt(self.d))
        if (isinstance(self.scale, bool) or not isinstance(self.scale, int | float)
                or not math.isfinite(self.scale) or self.scale <= 0):
            raise ProblemError("scale", f"must be a positive finite number, got {self.scale!r}")
        object.__setattr__(self, "scale", float(self.scale))

    # -- identity -------------------------------------------------------------------------------
    def key(self) -> str:
        return (f"attention:b{self.batch}:h{self.heads}:kv{self.kv_heads}:q{self.s_q}:"
                f"k{self.s_kv}:d{self.d}:{'causal' if self.causal else 'full'}:{self.dtype}:"
                f"s{self.scale!r}")

    @classmethod
    def from_key(cls, key: str) -> AttentionProblem:
        parts = key.split(":")
        if len(parts) != 10 or parts[0] != "attention":
            raise ProblemError("key", f"not an attention problem key: {key!r}")
        try:
            b, h, kv, q, k, d = (int(p.lstrip("bhkvqd")) for p in parts[1:7])
            return cls(batch=b, heads=h, kv_heads=kv, s_q=q, s_kv=k, d=d,
                       causal=parts[7] == "causal", dtype=parts[8], scale=float(parts[9][1:]))
        except ValueError as exc:
            raise ProblemError("key", f"not an attention problem key: {key!r}") from exc

    def describe(self) -> str:
        heads = f"h{self.heads}" + (f"/kv{self.kv_heads}" if self.kv_heads != self.heads else "")
        mask = " causal" if self.causal else ""
        return f"b{self.batch} {heads} s{self.s_q}x{self.s_kv} d{self.d}{mask} {self.dtype}"

    # -- roofline inputs --------------------------------------------------------------------------
    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // int(self.kv_heads or self.heads)

    @property
    def flops(self) -> int:
        """``4 * batch * heads * d`` per kept (query, key) pair: Q K^T and P V."""
        return 4 * self.batch * self.heads * self.d * kept_pairs(self.s_q, self.s_kv, self.causal)

    @property
    def min_bytes(self) -> int:
        """Q, K and V read once, O written once."""
        e = DTYPE_BYTES[self.dtype]
        q_o = 2 * self.batch * self.heads * self.s_q * self.d
        k_v = 2 * self.batch * int(self.kv_heads or self.heads) * self.s_kv * self.d
        return (q_o + k_v) * e

    def tflops(self, median_us: float) -> float:
        return self.flops / (median_us * 1e-6) / 1e12

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
