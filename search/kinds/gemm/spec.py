"""The GEMM problem: its spec, validation with field-named errors, key, FLOPs and bytes.

``GemmProblem`` checks what a GEMM *is*; :func:`check_served` what the service *runs*.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from search.types import ProblemError

__all__ = ["DTYPE_BYTES", "FP8_ALIGNMENT", "FP8_OUT_DTYPES", "LAYOUTS", "SERVED_DTYPES",
           "Backend", "GemmProblem", "check_served"]

#: Element sizes in bytes of the dtypes a problem may name.
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8_e4m3": 1}
LAYOUTS = ("row", "col")
#: The largest extent of a dimension (a 32-bit signed index).
MAX_DIM = 2**31 - 1
#: Input dtypes some backend serves (``check_served`` adds the per-dtype rules).
SERVED_DTYPES = ("bf16", "fp16", "fp32", "fp8_e4m3")
#: Output dtypes of an fp8 problem: what both fp8 library backends write, ``torch._scaled_mm``
#: (cuBLASLt) and the CUTLASS SM90 fp8 kernels. fp8 output would need an output scale too.
FP8_OUT_DTYPES = ("bf16", "fp16", "fp32")
#: ``torch._scaled_mm`` (the fp8 library baseline) requires k and n to be multiples of 16.
FP8_ALIGNMENT = 16


class Backend(StrEnum):
    CUBLAS = "cublas"
    CUBLASLT = "cublaslt"
    TRITON = "triton"
    CUTLASS = "cutlass"


@dataclass(frozen=True)
class GemmProblem:
    """``C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]``.

    ``dtype`` is the dtype of A and B; ``out_dtype`` of C (defaults to ``dtype``, bf16 for fp8);
    accumulation is in ``acc_dtype``. Layouts say how A and B are stored: ``row`` is row-major
    (the last index is contiguous), ``col`` column-major.
    """

    m: int = field(metadata={"help": "rows of A and C"})
    n: int = field(metadata={"help": "columns of B and C"})
    k: int = field(metadata={"help": "the reduction: columns of A, rows of B"})
    batch: int = field(default=1, metadata={"help": "independent products"})
    dtype: str = field(default="bf16", metadata={
        "help": "dtype of A and B: bf16, fp16, fp32 or fp8_e4m3 (fp8: per-tensor scales, B "
                "column-major, library kernels only)", "choices": tuple(DTYPE_BYTES)})
    out_dtype: str | None = field(default=None, metadata={
        "help": "dtype of C (default: dtype; bf16 for fp8_e4m3)",
        "choices": FP8_OUT_DTYPES})
    acc_dtype: str = field(default="fp32", metadata={"help": "accumulation dtype",
                                                      "choices": ("fp32",)})
    layout_a: str = field(default="row", metadata={"help": "A row- or column-major: row, col",
                                                    "choices": LAYOUTS})
    layout_b: str = field(default="row", metadata={
        "help": "B row- or column-major: row, col (a request without it: col for fp8_e4m3, "
                "the one layout fp8 takes)", "choices": LAYOUTS})
    kind: str = field(default="gemm", init=False)

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ProblemError(name, f"must be an integer, got {value!r}")
            if value <= 0:
                raise ProblemError(name, f"must be a positive integer, got {value}")
            if value > MAX_DIM:
                raise ProblemError(name, f"must be at most {MAX_DIM}, got {value}")
        for name in ("dtype", "acc_dtype"):
            if getattr(self, name) not in DTYPE_BYTES:
                raise ProblemError(name, f"unknown dtype {getattr(self, name)!r}; one of "
                                   f"{sorted(DTYPE_BYTES)}")
        if self.out_dtype is None:
            object.__setattr__(self, "out_dtype", "bf16" if self.dtype == "fp8_e4m3"
                               else self.dtype)
        if self.out_dtype not in DTYPE_BYTES or self.out_dtype == "fp8_e4m3":
            raise ProblemError("out_dtype", f"must be one of bf16, fp16, fp32, got "
                               f"{self.out_dtype!r}")
        if self.acc_dtype != "fp32":
            raise ProblemError("acc_dtype", "only fp32 accumulation is supported")
        for name in ("layout_a", "layout_b"):
            if getattr(self, name) not in LAYOUTS:
                raise ProblemError(name, f"must be 'row' or 'col', got {getattr(self, name)!r}")

    # -- identity -----------------------------------------------------------------------------
    def key(self) -> str:
        """Canonical key: two requests for the same problem get the same key."""
        return (f"gemm:b{self.batch}:m{self.m}:n{self.n}:k{self.k}:{self.dtype}:"
                f"{self.out_dtype}:{self.acc_dtype}:{self.layout_a[0]}{self.layout_b[0]}")

    @classmethod
    def from_key(cls, key: str) -> GemmProblem:
        """The problem whose :meth:`key` is ``key`` (recorded measurements are keyed so)."""
        parts = key.split(":")
        if len(parts) != 9 or parts[0] != "gemm" or len(parts[8]) != 2:
            raise ProblemError("key", f"not a GEMM problem key: {key!r}")
        try:
            dims = {p[0]: int(p[1:]) for p in parts[1:5]}
            layouts = {"r": "row", "c": "col"}
            return cls(m=dims["m"], n=dims["n"], k=dims["k"], batch=dims["b"], dtype=parts[5],
                       out_dtype=parts[6], acc_dtype=parts[7], layout_a=layouts[parts[8][0]],
                       layout_b=layouts[parts[8][1]])
        except (KeyError, ValueError) as exc:
            raise ProblemError("key", f"not a GEMM problem key: {key!r}") from exc

    def describe(self) -> str:
        batch = f"{self.batch}x" if self.batch > 1 else ""
        return f"{batch}{self.m}x{self.n}x{self.k} {self.dtype}"

    # -- roofline inputs ----------------------------------------------------------------------
    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    @property
    def out_bytes(self) -> int:
        """The output's size."""
        return self.batch * self.m * self.n * DTYPE_BYTES[self.out_dtype or self.dtype]

    @property
    def min_bytes(self) -> int:
        """Each input read once, the output written once."""
        e_in = DTYPE_BYTES[self.dtype]
        return self.batch * (self.m * self.k + self.k * self.n) * e_in + self.out_bytes

    def tflops(self, median_us: float) -> float:
        return self.flops / (median_us * 1e-6) / 1e12

    @property
    def scaled(self) -> bool:
        """Whether the operands carry per-tensor scales: fp8 values are stored scaled into
        fp8's narrow range, and the product is ``(scale_a * A) @ (scale_b * B)``."""
        return self.dtype == "fp8_e4m3"

    # -- wire format --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GemmProblem:
        data = {k: v for k, v in data.items() if k != "kind" and v is not None}
        return cls(**data)


def check_served(problem: GemmProblem) -> None:
    """Raise ``ProblemError`` naming the field unless some backend can serve ``problem``.

    ``GemmProblem`` checks what a GEMM *is*; this checks what the service *runs*, so a kernel
    library can still describe (and explain why it cannot serve) any valid problem. fp8 e4m3
    is served by the library backends only (``torch._scaled_mm`` and CUTLASS), and their rules
    are the problem's: both operands K-major (the fp8 WGMMA reads them so, and cuBLASLt fp8
    is "TN" only), 2-D (``torch._scaled_mm`` takes no batch), k and n multiples of 16.
    """
    if problem.dtype not in SERVED_DTYPES:
        raise ProblemError("dtype", f"dtype {problem.dtype} is not served by any backend; "
                                    f"served: {', '.join(SERVED_DTYPES)}")
    if not problem.scaled:
        return
    if problem.out_dtype not in FP8_OUT_DTYPES:
        raise ProblemError("out_dtype", f"fp8_e4m3 problems write one of "
                                        f"{', '.join(FP8_OUT_DTYPES)}, not {problem.out_dtype}")
    if problem.layout_a != "row":
        raise ProblemError("layout_a", "fp8_e4m3 needs A row-major (layout_a='row'): fp8 tensor "
                                       "cores and torch._scaled_mm read A K-major")
    if problem.layout_b != "col":
        raise ProblemError("layout_b", "fp8_e4m3 needs B column-major (layout_b='col'): fp8 "
                                       "tensor cores and torch._scaled_mm read B K-major")
    if problem.batch != 1:
        raise ProblemError("batch", f"fp8_e4m3 problems must have batch=1, got {problem.batch}:"
                                    " torch._scaled_mm, the library baseline, is 2-D only")
    for name in ("k", "n"):
        value = getattr(problem, name)
        if value % FP8_ALIGNMENT:
            raise ProblemError(name, f"fp8_e4m3 needs {name} to be a multiple of "
                                     f"{FP8_ALIGNMENT} (torch._scaled_mm), got {value}")
