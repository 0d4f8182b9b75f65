"""Operand alignment, and how the alignment repair copies an unaligned GEMM's operands.

A row of a stored matrix (its contiguous run) whose size in bytes is not a multiple of 16 cannot
be read through TMA descriptors or 16-byte vector loads: cuBLAS falls back to slow kernels,
CUTLASS refuses the problem, and Triton's loads become scalar. The repair copies such operands,
in one fused Triton pass inside the timed call (``kernel_templates.gemm.repair``), into scratch
buffers whose rows are aligned, then runs an aligned kernel on the copies. This module is the
arithmetic of that plan, shared by the search side (which problems are repaired, what the
scratch costs) and the kernels (what to allocate and copy): no torch here.

Two plans (``RepairPlan``):

- ``padded`` (the library's: cuBLAS and CUTLASS on the copies): the inner problem is fully
  aligned, ``m x np x kp`` with ``kp`` and ``np`` rounded up to 16 bytes of elements, operands
  packed and zero-padded (the padding adds zeros to the sum), C written to a packed ``m x np``
  scratch and copied back when ``n`` is padded. Both operands are copied whenever the padded
  ``k`` differs from ``k`` (each holds the K extent).
- views (the Triton kernels'): only the operands whose rows are unaligned are copied, into
  buffers whose leading dimension is a multiple of ``VIEW_LD`` elements, and the kernel reads
  views of the true extents (TMA zero-fills past them, pointer loads mask them) and writes C
  directly, so nothing is copied back.

``b_layout`` says how a copied B is stored: ``"row"`` (``[k, n]`` row-major) or ``"kmajor"``
(``[n, k]`` row-major, i.e. B column-major, the layout the ``TN`` library kernels read);
``"keep"`` (views only) leaves an aligned B where it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from search.kinds.gemm.spec import DTYPE_BYTES, GemmProblem

__all__ = ["ALIGN_BYTES", "B_LAYOUTS", "MAX_SCRATCH_SHARE", "VIEW_LD", "RepairPlan",
           "b_layouts", "describe_unaligned", "repair_fits", "unaligned"]

#: What TMA and vector loads need of a row (and of its start).
ALIGN_BYTES = 16
#: How a copied B is stored (see the module docstring).
B_LAYOUTS = ("keep", "row", "kmajor")
#: Leading dimension of the views plan's scratch, in elements: 128 bytes for 16-bit inputs,
#: so Triton, which specialises integer arguments on divisibility by 16, proves the alignment
#: of pointer loads too, and every row starts on a cache line.
VIEW_LD = 64
#: The most of a device's memory the repair's scratch may take (it is allocated per input set,
#: beside the operands; ``repair_fits``).
MAX_SCRATCH_SHARE = 0.25


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _elems(dtype: str) -> int:
    """Elements in ``ALIGN_BYTES`` of ``dtype``."""
    return max(1, ALIGN_BYTES // DTYPE_BYTES[dtype])


def unaligned(problem: GemmProblem) -> tuple[str, ...]:
    """The matrices (``"A"``, ``"B"``, ``"C"``) whose stored rows are not multiples of 16 bytes:
    A's rows are ``k`` long row-major, ``m`` column-major; B's ``n`` and ``k``; C (row-major)
    ``n`` of the output dtype."""
    e_in, e_out = DTYPE_BYTES[problem.dtype], DTYPE_BYTES[problem.out_dtype or problem.dtype]
    rows = {"A": problem.k if problem.layout_a == "row" else problem.m,
            "B": problem.n if problem.layout_b == "row" else problem.k}
    out = [name for name, length in rows.items() if (length * e_in) % ALIGN_BYTES]
    if (problem.n * e_out) % ALIGN_BYTES:
        out.append("C")
    return tuple(out)


def describe_unaligned(problem: GemmProblem) -> str:
    """A clause naming the unaligned rows: ``"rows of A (k=1537 bf16) and C (n=2047 bf16) are
    not multiples of 16 bytes"``."""
    out_dtype = problem.out_dtype or problem.dtype
    what = {"A": ("k" if problem.layout_a == "row" else "m", problem.dtype),
            "B": ("n" if problem.layout_b == "row" else "k", problem.dtype),
            "C": ("n", out_dtype)}
    parts = [f"{name} ({what[name][0]}={getattr(problem, what[name][0])} {what[name][1]})"
             for name in unaligned(problem)]
    listed = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    return f"rows of {listed} are not multiples of {ALIGN_BYTES} bytes"


def _padded_kn(problem: GemmProblem) -> tuple[int, int]:
    """The padded plan's K and N: rounded up to 16 bytes of the input (K) and of the input and
    output (N) elements."""
    al_n = max(_elems(problem.dtype), _elems(problem.out_dtype or problem.dtype))
    return _round_up(problem.k, _elems(problem.dtype)), _round_up(problem.n, al_n)


def b_layouts(problem: GemmProblem, padded: bool) -> tuple[str, ...]:
    """The ``b_layout`` values a plan may take: a B that must be copied (its rows unaligned or,
    padded, its K or N extent padded) is stored row-major or K-major; one that need not be may
    also stay where it is (``"keep"``)."""
    kp, np_ = _padded_kn(problem)
    must = "B" in unaligned(problem) or (padded and (kp, np_) != (problem.k, problem.n))
    return ("row", "kmajor") if must else ("keep", "kmajor")


@dataclass(frozen=True)
class RepairPlan:
    """What the repair of ``problem`` copies, allocates and runs (see the module docstring).

    Shapes are ``(rows, cols)`` of packed row-major buffers (``None``: not copied): ``a_buf``
    holds A row-major, ``b_buf`` B as ``b_layout`` says, ``c_buf`` the output the inner kernel
    writes before the copy back."""

    problem: GemmProblem
    padded: bool
    b_layout: str
    a_buf: tuple[int, int] | None
    b_buf: tuple[int, int] | None
    c_buf: tuple[int, int] | None
    #: the inner kernel's K and N (padded plan: rounded up; views: the problem's)
    k: int
    n: int

    @classmethod
    def of(cls, problem: GemmProblem, b_layout: str, padded: bool) -> RepairPlan:
        """The plan for ``problem``; ``ValueError`` when it needs no repair, is batched, or
        ``b_layout`` is not one of ``b_layouts(problem, padded)``."""
        bad = unaligned(problem)
        if not bad:
            raise ValueError(f"{problem.describe()} is aligned: nothing to repair")
        if problem.batch != 1:
            raise ValueError("the alignment repair serves batch 1")
        if b_layout not in b_layouts(problem, padded):
            raise ValueError(f"b_layout {b_layout!r} is not one of "
                             f"{b_layouts(problem, padded)} for {problem.describe()}")
        m, n, k = problem.m, problem.n, problem.k
        if padded:
            kp, np_ = _padded_kn(problem)
            a_buf = None if "A" not in bad and kp == k else (m, kp)
            b_buf = {"keep": None, "row": (kp, np_), "kmajor": (np_, kp)}[b_layout]
            c_buf = (m, np_) if np_ != n else None
            return cls(problem, True, b_layout, a_buf, b_buf, c_buf, kp, np_)
        ld_k, ld_n = _round_up(k, VIEW_LD), _round_up(n, VIEW_LD)
        a_buf = (m, ld_k) if "A" in bad else None
        b_buf = {"keep": None, "row": (k, ld_n), "kmajor": (n, ld_k)}[b_layout]
        return cls(problem, False, b_layout, a_buf, b_buf, None, k, n)

    @property
    def inner(self) -> GemmProblem:
        """The problem the inner kernel solves."""
        p = self.problem
        layout_a = "row" if self.a_buf is not None else p.layout_a
        layout_b = {"row": "row", "kmajor": "col", "keep": p.layout_b}[self.b_layout]
        return GemmProblem(m=p.m, n=self.n, k=self.k, dtype=p.dtype, out_dtype=p.out_dtype,
                           layout_a=layout_a, layout_b=layout_b)

    @property
    def copied(self) -> tuple[str, ...]:
        """The operands the fused pass copies."""
        return tuple(name for name, buf in (("A", self.a_buf), ("B", self.b_buf)) if buf)

    @property
    def scratch_bytes(self) -> int:
        """Bytes of scratch one call's buffers hold."""
        e_in = DTYPE_BYTES[self.problem.dtype]
        e_out = DTYPE_BYTES[self.problem.out_dtype or self.problem.dtype]
        total = sum(r * c * e_in for r, c in (self.a_buf or (0, 0), self.b_buf or (0, 0)))
        if self.c_buf is not None:
            total += self.c_buf[0] * self.c_buf[1] * e_out
        return total

    @property
    def copy_bytes(self) -> int:
        """Bytes the repair moves through memory per call: each copied operand read and its
        buffer written, and the padded output read back and written to C."""
        e_in = DTYPE_BYTES[self.problem.dtype]
        e_out = DTYPE_BYTES[self.problem.out_dtype or self.problem.dtype]
        p = self.problem
        moved = 0
        if self.a_buf:
            moved += (p.m * p.k + self.a_buf[0] * self.a_buf[1]) * e_in
        if self.b_buf:
            moved += (p.k * p.n + self.b_buf[0] * self.b_buf[1]) * e_in
        if self.c_buf:
            moved += (self.c_buf[0] * self.c_buf[1] + p.m * p.n) * e_out
        return moved

    def describe(self) -> str:
        """A phrase for the rationale: what is copied, how B is stored."""
        what = " and ".join(self.copied) or "nothing"
        b = {"row": "row-major", "kmajor": "K-major", "keep": "in place"}[self.b_layout]
        back = ", C through a padded buffer" if self.c_buf else ""
        return f"{what} copied to aligned scratch (B {b}{back})"


def repair_fits(plan: RepairPlan, memory_bytes: int) -> str | None:
    """``None`` when ``plan``'s scratch fits a device of ``memory_bytes`` (0: unknown, always
    fits), else why not: the scratch may take ``MAX_SCRATCH_SHARE`` of the memory, and the
    operands and the scratch together must fit it."""
    if memory_bytes <= 0:
        return None
    scratch = plan.scratch_bytes
    if scratch > MAX_SCRATCH_SHARE * memory_bytes:
        return (f"the repair's scratch ({scratch / 2**20:.0f} MiB) is over "
                f"{MAX_SCRATCH_SHARE:.0%} of the device's {memory_bytes / 2**30:.1f} GiB")
    if plan.problem.min_bytes + scratch > memory_bytes:
        return (f"the operands and the repair's scratch "
                f"({(plan.problem.min_bytes + scratch) / 2**30:.1f} GiB) do not fit the "
                f"device's {memory_bytes / 2**30:.1f} GiB")
    return None
