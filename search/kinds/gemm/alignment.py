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
- ``split`` (the library's, where only A's rows are unaligned and they are ``k`` long, B and C
  aligned: ``split_applies``): K is cut at ``k_al``, the largest multiple of 16 bytes of
  elements. One launch copies A's first ``k_al`` columns into aligned scratch and writes C with
  the product of the last ``k - k_al`` columns of A and rows of B (a rank-``r`` update, ``r <
  8`` for 16-bit inputs); the library kernel then adds the aligned ``m x n x k_al`` product to C
  (``beta = 1``) reading B in place through a view of its first ``k_al`` rows. No operand is
  padded, so B, the larger operand of a small-``m`` shape, is never copied.

``b_layout`` says how a copied B is stored: ``"row"`` (``[k, n]`` row-major) or ``"kmajor"``
(``[n, k]`` row-major, i.e. B column-major, the layout the ``TN`` library kernels read);
``"keep"`` (views only) leaves an aligned B where it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from search.kinds.gemm.spec import DTYPE_BYTES, GemmProblem

__all__ = ["ALIGN_BYTES", "B_LAYOUTS", "MAX_SCRATCH_SHARE", "VIEW_LD", "RepairPlan",
           "b_layouts", "describe_unaligned", "repair_fits", "split_applies", "tma_loads",
           "tma_loads_rule", "unaligned"]

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


def tma_loads(problem: GemmProblem) -> bool:
    """Whether TMA can load both operands: bf16/fp16, with A's and B's rows aligned."""
    return problem.dtype in ("bf16", "fp16") and not {"A", "B"} & set(unaligned(problem))


def tma_loads_rule(problem: GemmProblem) -> str:
    """What ``tma_loads`` asks, and what ``problem`` has, for a violation's message."""
    return (f"bf16 or fp16 operands with {ALIGN_BYTES}-byte aligned rows (this problem: "
            f"{problem.dtype}, unaligned {list(unaligned(problem)) or 'none'})")


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


def split_applies(problem: GemmProblem) -> bool:
    """Whether the ``split`` plan serves ``problem``: batch 1, only A's rows unaligned, A
    row-major (its rows are ``k`` long), and at least one aligned step of K."""
    return (problem.batch == 1 and unaligned(problem) == ("A",) and problem.layout_a == "row"
            and problem.k >= _elems(problem.dtype))


@dataclass(frozen=True)
class RepairPlan:
    """What the repair of ``problem`` copies, allocates and runs (see the module docstring).

    Shapes are ``(rows, cols)`` of packed row-major buffers (``None``: not copied): ``a_buf``
    holds A row-major, ``b_buf`` B as ``b_layout`` says, ``c_buf`` the output the inner kernel
    writes before the copy back. ``tail`` is the split plan's ``r``: the columns of A (rows of
    B) past the inner ``k`` whose product the copy launch writes to C first (0: no split)."""

    problem: GemmProblem
    padded: bool
    b_layout: str
    a_buf: tuple[int, int] | None
    b_buf: tuple[int, int] | None
    c_buf: tuple[int, int] | None
    #: the inner kernel's K and N (padded plan: rounded up; views: the problem's; split: K cut
    #: down to a multiple of 16 bytes)
    k: int
    n: int
    tail: int = 0

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

    @classmethod
    def split_of(cls, problem: GemmProblem) -> RepairPlan:
        """The split plan for ``problem``; ``ValueError`` where ``split_applies`` is false."""
        if not split_applies(problem):
            raise ValueError(f"the split plan needs only A's rows unaligned, A row-major and k "
                             f"of at least 16 bytes; {problem.describe()} is not so")
        k_al = problem.k // _elems(problem.dtype) * _elems(problem.dtype)
        a_buf = (problem.m, _round_up(k_al, VIEW_LD))
        return cls(problem, False, "keep", a_buf, None, None, k_al, problem.n,
                   tail=problem.k - k_al)

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
        buffer written, the padded output read back and written to C, and the split plan's
        tail."""
        e_in = DTYPE_BYTES[self.problem.dtype]
        e_out = DTYPE_BYTES[self.problem.out_dtype or self.problem.dtype]
        p = self.problem
        moved = 0
        if self.a_buf:
            read = p.m * (self.k if self.tail else p.k)
            moved += (read + self.a_buf[0] * self.a_buf[1]) * e_in
        if self.b_buf:
            moved += (p.k * p.n + self.b_buf[0] * self.b_buf[1]) * e_in
        if self.c_buf:
            moved += (self.c_buf[0] * self.c_buf[1] + p.m * p.n) * e_out
        if self.tail:
            # the tail's columns of A and rows of B read, C written, then read by the inner kernel
            moved += (p.m + p.n) * self.tail * e_in + 2 * p.m * p.n * e_out
        return moved

    def describe(self) -> str:
        """A phrase for the rationale: what is copied, how B is stored."""
        what = " and ".join(self.copied) or "nothing"
        b = {"row": "row-major", "kmajor": "K-major", "keep": "in place"}[self.b_layout]
        back = ", C through a padded buffer" if self.c_buf else ""
        if self.tail:
            return (f"K split at {self.k}: A's first {self.k} columns copied to aligned "
                    f"scratch and the last {self.tail} columns' product written to C in the "
                    f"same launch, then the aligned product added to C (B in place)")
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
