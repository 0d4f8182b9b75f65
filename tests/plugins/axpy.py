"""A test-only problem kind, ``axpy`` (``out = alpha * x + y`` over ``n`` elements), added as
a plug-in: its spec and search side register with ``search.kinds``, its kernels (a torch
library side, a Triton custom side) with ``kernel_templates.registry``. Nothing outside this
file names it: the service and the worker import it because ``KS_PLUGINS`` names this module,
which proves that a new kind runs through the real service, a real worker and the decision
loop without a change to their code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from search import kinds
from search.decision import Policy, TierPlan
from search.kinds.base import Catalogues, LibraryPlan
from search.limits import DeviceLimits
from search.optimizer import Choice, SpaceTuner
from search.types import ProblemError

NAME = "axpy"
DTYPE_BYTES = {"fp16": 2, "fp32": 4}
TIER = "blocks"
LIBRARY, CUSTOM = "torch", "triton"


@dataclass(frozen=True)
class AxpyProblem:
    """``out[i] = alpha * x[i] + y[i]`` for ``i < n``."""

    n: int
    dtype: str = "fp32"
    alpha: float = 2.0
    kind: str = field(default=NAME, init=False)

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or not 0 < self.n <= 1 << 30:
            raise ProblemError("n", f"must be an integer in 1..2^30, got {self.n!r}")
        if self.dtype not in DTYPE_BYTES:
            raise ProblemError("dtype", f"one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")
        if (isinstance(self.alpha, bool) or not isinstance(self.alpha, int | float)
                or not math.isfinite(self.alpha)):
            raise ProblemError("alpha", f"must be a finite number, got {self.alpha!r}")

    def key(self) -> str:
        return f"{NAME}:n{self.n}:{self.dtype}:a{float(self.alpha)!r}"

    def describe(self) -> str:
        return f"axpy n={self.n} {self.dtype}"

    @property
    def flops(self) -> int:
        return 2 * self.n

    @property
    def min_bytes(self) -> int:
        return 3 * self.n * DTYPE_BYTES[self.dtype]

    def tflops(self, median_us: float) -> float:
        return self.flops / (median_us * 1e-6) / 1e12

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def space(problem: AxpyProblem) -> tuple[Choice, ...]:
    return (Choice("BLOCK", (32, 64, 128, 256, 512)), Choice("num_warps", (1, 2, 4)))


class AxpyKind(kinds.ProblemKind):
    """The search side: torch is the library (and the baseline), Triton the custom side with
    one tier over block size and warps."""

    name = NAME
    problem_type = AxpyProblem
    library_backends = (LIBRARY,)
    custom_backends = (CUSTOM,)
    baseline_backend = LIBRARY

    def from_key(self, key: str) -> AxpyProblem:
        _, n, dtype, alpha = key.split(":")
        return AxpyProblem(n=int(n[1:]), dtype=dtype, alpha=float(alpha[1:]))

    def library_plan(self, problem: Any, policy: Policy, backends: Sequence[str],
                     gpu_model: str, catalogues: Catalogues, seeds: int) -> LibraryPlan:
        return LibraryPlan(((LIBRARY, {}),) if LIBRARY in backends else ())

    def tier_plans(self, problem: Any, device: Mapping[str, Any], policy: Policy
                   ) -> tuple[TierPlan, ...]:
        return (TierPlan(TIER, 1.0, True, "always"),)

    def backend_of(self, tier: str) -> str:
        return CUSTOM

    def tuner(self, storage_url: str, problem: Any, gpu_model: str, limits: DeviceLimits,
              seed: int, tier: str | None, catalogues: Catalogues) -> SpaceTuner:
        return SpaceTuner(storage_url, f"{NAME}|{tier}|{problem.key()}|{gpu_model}",
                          space(problem), seeds=[{"BLOCK": 64, "num_warps": 1}], seed=seed)


kinds.register(AxpyKind())


# -- the kernels (where torch is: a worker and its benchmark child) ------------------------------
def _register_kernels() -> None:
    import torch
    import triton
    import triton.language as tl

    from kernel_templates import registry

    dtypes = {"fp16": torch.float16, "fp32": torch.float32}

    @dataclass
    class Inputs:
        x: Any
        y: Any
        out: Any
        alpha: float

    def make_inputs(problem: AxpyProblem, device: Any, seed: int) -> Inputs:
        gen = torch.Generator(device=device).manual_seed(seed)
        dt = dtypes[problem.dtype]
        x = torch.randn(problem.n, generator=gen, device=device).to(dt)
        y = torch.randn(problem.n, generator=gen, device=device).to(dt)
        out = torch.full((problem.n,), float("nan"), dtype=dt, device=device)  # poisoned
        return Inputs(x, y, out, float(problem.alpha))

    def reference(problem: AxpyProblem, inp: Inputs) -> Any:
        return inp.alpha * inp.x.to(torch.float64) + inp.y.to(torch.float64)

    def rel_error(out: Any, ref: Any) -> float:
        diff = out.to(torch.float64) - ref
        if not bool(torch.isfinite(diff).all()):
            return math.inf
        return float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref))

    def tolerance(problem: AxpyProblem, config: dict[str, Any]) -> float:
        return 2e-3 if problem.dtype == "fp16" else 1e-6

    @triton.jit
    def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
        y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
        tl.store(out_ptr + offs, (alpha * x + y).to(out_ptr.dtype.element_ty), mask=mask)

    def library(candidate: Any, inp: Inputs) -> Any:
        return lambda: torch.add(inp.y, inp.x, alpha=inp.alpha, out=inp.out)

    def custom(candidate: Any, inp: Inputs) -> Any:
        block, warps = int(candidate.config["BLOCK"]), int(candidate.config["num_warps"])
        grid = (triton.cdiv(candidate.problem.n, block),)
        return lambda: axpy_kernel[grid](inp.x, inp.y, inp.out, candidate.problem.n, inp.alpha,
                                         BLOCK=block, num_warps=warps)

    registry.register_kind(registry.KernelKind(NAME, make_inputs, reference, rel_error,
                                               tolerance))
    registry.register(NAME, LIBRARY, library)
    registry.register(NAME, CUSTOM, custom)


try:
    import torch  # noqa: F401
except ImportError:  # the API process needs the spec alone
    pass
else:
    _register_kernels()
