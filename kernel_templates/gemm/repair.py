"""Alignment repair: one fused Triton pass copies unaligned operands into aligned scratch, then
an aligned kernel of any backend runs on the copies, all inside the one timed call.

The plan (what is copied, the buffers' shapes, the inner problem) is
``search.kinds.gemm.alignment.RepairPlan``; this module allocates its scratch, launches the copy
and wraps the inner kernel:

- ``RepairedCall`` with ``padded`` plans: the library's side (``repaired`` backend): cuBLAS
  (``torch.matmul``) or a CUTLASS operation on packed, zero-padded copies; when ``n`` was
  padded, C goes through a padded buffer and the same copy kernel writes it back.
- ``RepairedCall`` with views plans: the Triton side (``triton_repair`` backend): the tiled or
  the stream-K template on views of the copies with the problem's true extents, writing C
  directly.
- ``RepairedCall`` with a split plan (``repaired``, cuBLAS): ``_split_kernel`` copies A's
  aligned columns and writes C with the K tail's rank-``r`` product in one launch; the inner
  kernel (``Inner`` then adds to C) runs on the copy and a view of B's aligned rows.

The copy kernel (``_repair_kernel``) runs two copy jobs in one launch (program ids first cover
A's destination tiles, then B's). Each job reads its source in storage order (loads coalesced
along the source's contiguous dimension), transposes the tile in registers when the destination
is the source's transpose (a column-major A into row-major, a row-major B into K-major), and
writes every element of the destination buffer: the source's values, and zeros past its extents,
so a padded buffer needs no separate clear.

Scratch is allocated per callable (one per input set, so rotating input sets rotate their scratch
too), sized by the plan and refused (``Unsupported``) when it would take more than
``alignment.MAX_SCRATCH_SHARE`` of the device's memory or more than is free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from kernel_templates.errors import Unsupported
from search.kinds.gemm.alignment import MAX_SCRATCH_SHARE, RepairPlan

__all__ = ["COPY_BLOCK", "SPLIT_BLOCK", "RepairedCall", "Scratch", "allocate", "copy_back",
           "repair"]

#: The copy kernel's tile (destination rows x columns) and warps: 16 KB of bf16 per program.
COPY_BLOCK = (64, 128)
_COPY_WARPS = 4
#: The split plan's launch: the tile of its A copy and of its C tail (8 KB of bf16).
SPLIT_BLOCK = (32, 128)


@triton.jit
def _copy_job(src, dst, SR, SC, s_ld, DR, DC, d_ld, tile,
              TRANS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, D_DIV: tl.constexpr):
    # Destination tile ``tile`` (row-major order of [DR, DC] in BR x BC tiles). Source [SR, SC]
    # row-major with leading dimension s_ld; the destination is the source (TRANS false) or
    # its transpose, zero past the source's extents. D_DIV divides d_ld and DC: rounding them
    # down to it changes nothing but tells the compiler, so the stores (rows and their masks
    # aligned) are 16-byte vectors.
    d_ld = (d_ld // D_DIV) * D_DIV
    DC = (DC // D_DIV) * D_DIV
    tiles_c = tl.cdiv(DC, BC)
    tr = tile // tiles_c
    tc = tile % tiles_c
    offs_dr = tr * BR + tl.arange(0, BR)
    offs_dc = tc * BC + tl.arange(0, BC)
    if TRANS:
        # source rows are destination columns: load [BC, BR] along the source's rows
        src_ptrs = src + offs_dc.to(tl.int64)[:, None] * s_ld + offs_dr[None, :]
        x = tl.load(src_ptrs, mask=(offs_dc[:, None] < SR) & (offs_dr[None, :] < SC), other=0.0)
        x = tl.trans(x)
    else:
        src_ptrs = src + offs_dr.to(tl.int64)[:, None] * s_ld + offs_dc[None, :]
        x = tl.load(src_ptrs, mask=(offs_dr[:, None] < SR) & (offs_dc[None, :] < SC), other=0.0)
    dst_ptrs = dst + offs_dr.to(tl.int64)[:, None] * d_ld + offs_dc[None, :]
    tl.store(dst_ptrs, x, mask=(offs_dr[:, None] < DR) & (offs_dc[None, :] < DC))


@triton.jit
def _repair_kernel(
    a_src, a_dst, A_SR, A_SC, a_sld, A_DR, A_DC, a_dld, TILES_A,
    b_src, b_dst, B_SR, B_SC, b_sld, B_DR, B_DC, b_dld,
    TRANS_A: tl.constexpr, TRANS_B: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
    A_DIV: tl.constexpr, B_DIV: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    if pid < TILES_A:
        _copy_job(a_src, a_dst, A_SR, A_SC, a_sld, A_DR, A_DC, a_dld, pid, TRANS_A, BR, BC,
                  A_DIV)
    else:
        _copy_job(b_src, b_dst, B_SR, B_SC, b_sld, B_DR, B_DC, b_dld, pid - TILES_A, TRANS_B,
                  BR, BC, B_DIV)


@triton.jit
def _tail_job(a, b, c, M, N, K_AL, s_am, s_ak, s_bk, s_bn, s_cm, tile,
              R: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    # C's tile ``tile`` (row-major order of [M, N] in BR x BC tiles) = A[:, K_AL:K_AL+R] @
    # B[K_AL:K_AL+R, :] in fp32, cast to C's dtype: the K tail that the aligned product skips.
    tiles_n = tl.cdiv(N, BC)
    offs_m = (tile // tiles_n) * BR + tl.arange(0, BR)
    offs_n = (tile % tiles_n) * BC + tl.arange(0, BC)
    in_m = offs_m < M
    in_n = offs_n < N
    acc = tl.zeros((BR, BC), dtype=tl.float32)
    for j in tl.static_range(R):
        x = tl.load(a + offs_m.to(tl.int64) * s_am + (K_AL + j) * s_ak, mask=in_m, other=0.0)
        y = tl.load(b + (K_AL + j).to(tl.int64) * s_bk + offs_n * s_bn, mask=in_n, other=0.0)
        acc += x.to(tl.float32)[:, None] * y.to(tl.float32)[None, :]
    c_ptrs = c + offs_m.to(tl.int64)[:, None] * s_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c.dtype.element_ty), mask=in_m[:, None] & in_n[None, :])


@triton.jit
def _split_kernel(
    a, a_dst, M, K_AL, s_am, a_dld, TILES_A, b, s_bk, s_bn, c, N, s_cm,
    R: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, A_DIV: tl.constexpr,
):  # fmt: skip
    # The split plan's one launch: A's first K_AL columns copied (programs below TILES_A), and
    # C written with the K tail's product (the rest), which the aligned product then adds to.
    pid = tl.program_id(0)
    if pid < TILES_A:
        _copy_job(a, a_dst, M, K_AL, s_am, M, a_dld, a_dld, pid, False, BR, BC, A_DIV)
    else:
        _tail_job(a, b, c, M, N, K_AL, s_am, 1, s_bk, s_bn, s_cm, pid - TILES_A, R, BR, BC)


# -- host side ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """One copy: the source in storage order ``[rows, cols]`` with leading dimension ``ld``, the
    destination buffer, and whether the destination is the source transposed."""

    src: torch.Tensor
    rows: int
    cols: int
    ld: int
    dst: torch.Tensor
    trans: bool

    @property
    def tiles(self) -> int:
        r, c = self.dst.shape
        return triton.cdiv(r, COPY_BLOCK[0]) * triton.cdiv(c, COPY_BLOCK[1])

    @property
    def div(self) -> int:
        """The largest power of two (at most 16) dividing the destination's leading dimension
        and width."""
        ld, cols = self.dst.stride(0), self.dst.shape[1]
        return min(16, ld & -ld, cols & -cols)


def _storage(t: torch.Tensor) -> tuple[torch.Tensor, int, int, int, bool]:
    """``t`` (2-D) in storage order: ``(base, rows, cols, ld, transposed)``, ``transposed``
    when the storage rows are ``t``'s columns (column-major)."""
    if t.stride(1) == 1:
        return t, t.shape[0], t.shape[1], t.stride(0), False
    if t.stride(0) == 1:
        return t, t.shape[1], t.shape[0], t.stride(1), True
    raise Unsupported(f"the repair copies row- or column-major operands, got strides "
                      f"{tuple(t.stride())}")


def _job(src: torch.Tensor, dst: torch.Tensor, dst_is_transpose: bool) -> _Job:
    """Copy the logical matrix ``src`` into ``dst`` (packed row-major), as it is or, when
    ``dst_is_transpose``, transposed."""
    base, rows, cols, ld, stored_t = _storage(src)
    return _Job(base, rows, cols, ld, dst, trans=stored_t != dst_is_transpose)


def _launch(first: _Job, second: _Job | None) -> None:
    """Both jobs in one launch of ``_repair_kernel``."""
    other = second or first
    grid = first.tiles + (second.tiles if second else 0)
    _repair_kernel[(grid,)](
        first.src, first.dst, first.rows, first.cols, first.ld, first.dst.shape[0],
        first.dst.shape[1], first.dst.stride(0), first.tiles,
        other.src, other.dst, other.rows, other.cols, other.ld, other.dst.shape[0],
        other.dst.shape[1], other.dst.stride(0),
        TRANS_A=first.trans, TRANS_B=other.trans, BR=COPY_BLOCK[0], BC=COPY_BLOCK[1],
        A_DIV=first.div, B_DIV=other.div, num_warps=_COPY_WARPS,
    )  # fmt: skip


@dataclass(frozen=True)
class Scratch:
    """One callable's buffers (``None``: not used by the plan)."""

    a: torch.Tensor | None
    b: torch.Tensor | None
    c: torch.Tensor | None


def _check_memory(plan: RepairPlan, device: torch.device) -> None:
    if device.type != "cuda":
        return
    free, total = torch.cuda.mem_get_info(device)
    need = plan.scratch_bytes
    if need > MAX_SCRATCH_SHARE * total or need > free:
        raise Unsupported(f"the repair needs {need / 2**20:.0f} MiB of scratch; "
                          f"{free / 2**20:.0f} MiB are free of {total / 2**20:.0f} (at most "
                          f"{MAX_SCRATCH_SHARE:.0%} of the device may be scratch)")


def allocate(plan: RepairPlan, device: torch.device, in_dtype: torch.dtype,
             out_dtype: torch.dtype) -> Scratch:
    """The plan's scratch buffers on ``device`` (uninitialised: the copy writes all of it)."""
    _check_memory(plan, device)

    def buf(shape: tuple[int, int] | None, dtype: torch.dtype) -> torch.Tensor | None:
        return None if shape is None else torch.empty(shape, dtype=dtype, device=device)

    return Scratch(buf(plan.a_buf, in_dtype), buf(plan.b_buf, in_dtype),
                   buf(plan.c_buf, out_dtype))


def _views(plan: RepairPlan, a: torch.Tensor, b: torch.Tensor, s: Scratch
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The inner kernel's operands: ``[m, plan.k]`` and ``[plan.k, plan.n]`` views of the
    copies (or the operands themselves where not copied; B's first ``plan.k`` rows when the
    plan splits K)."""
    a_in = a if s.a is None else s.a[:, :plan.k]
    if s.b is None:
        b_in = b[:plan.k] if plan.tail else b
    elif plan.b_layout == "row":
        b_in = s.b[:plan.k, :plan.n]
    else:  # kmajor: the buffer is [n, k] row-major, i.e. B column-major
        b_in = s.b[:plan.n, :plan.k].t()
    return a_in, b_in


def repair(plan: RepairPlan, a: torch.Tensor, b: torch.Tensor, s: Scratch,
           out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy what ``plan`` copies of ``a`` and ``b`` into ``s`` (one launch) and return the
    inner kernel's operands (``_views``). A split plan also writes its K tail's product to
    ``out`` in that launch."""
    if plan.tail:
        if out is None:
            raise ValueError("a split plan writes the K tail's product to out")
        split_launch(a, b, s.a, out, plan.k)
        return _views(plan, a, b, s)
    # Whole buffers, zeros past the extents (a views plan's kernel never reads them, but
    # full rows of a 64-element multiple store as aligned vectors).
    jobs = []
    if s.a is not None:
        jobs.append(_job(a, s.a, dst_is_transpose=False))
    if s.b is not None:
        jobs.append(_job(b, s.b, dst_is_transpose=plan.b_layout == "kmajor"))
    if jobs:
        _launch(jobs[0], jobs[1] if len(jobs) > 1 else None)
    return _views(plan, a, b, s)


def split_launch(a: torch.Tensor, b: torch.Tensor, a_buf: torch.Tensor, out: torch.Tensor,
                 k_al: int) -> None:
    """The split plan's launch: ``a_buf`` (row-major, aligned rows) <- ``a[:, :k_al]`` (zeros
    past it), ``out`` (row-major) <- ``a[:, k_al:] @ b[k_al:, :]``; ``a`` row-major."""
    m, k = a.shape
    n = b.shape[1]
    if a.stride(1) != 1 or out.stride(1) != 1:
        raise Unsupported("the split plan reads a row-major A and writes a row-major C")
    ld = a_buf.stride(0)
    br, bc = SPLIT_BLOCK
    tiles_a = triton.cdiv(m, br) * triton.cdiv(ld, bc)
    tiles_c = triton.cdiv(m, br) * triton.cdiv(n, bc)
    _split_kernel[(tiles_a + tiles_c,)](
        a, a_buf, m, k_al, a.stride(0), ld, tiles_a, b, b.stride(0), b.stride(1), out, n,
        out.stride(0), R=k - k_al, BR=br, BC=bc, A_DIV=min(16, ld & -ld),
        num_warps=_COPY_WARPS)


def copy_back(c_buf: torch.Tensor, out: torch.Tensor) -> None:
    """``out`` (``[m, n]``) from the padded output buffer's first ``n`` columns."""
    m, n = out.shape
    _launch(_Job(c_buf, m, n, c_buf.stride(0), out, trans=False), None)


#: ``(a_in, b_in, c) -> callable`` writing ``a_in @ b_in`` into ``c`` (adding it to ``c`` under a
#: split plan): the inner kernel bound to the repaired operands (a factory, since library kernels
#: bind their operands once).
Inner = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Callable[[], Any]]


class RepairedCall:
    """``out = a @ b`` as one callable: the copy, the inner kernel, and the copy back when the
    plan pads C. The scratch is allocated once, here."""

    def __init__(self, plan: RepairPlan, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                 inner: Inner) -> None:
        if a.dim() != 2 or b.dim() != 2:
            raise Unsupported("the alignment repair serves 2-D operands (batch 1)")
        p = plan.problem
        if tuple(a.shape) != (p.m, p.k) or tuple(b.shape) != (p.k, p.n) \
                or tuple(out.shape) != (p.m, p.n):
            raise ValueError(f"operands {tuple(a.shape)} @ {tuple(b.shape)} -> "
                             f"{tuple(out.shape)} are not {p.describe()}")
        self.plan, self.a, self.b, self.out = plan, a, b, out
        self.scratch = allocate(plan, a.device, a.dtype, out.dtype)
        a_in, b_in = _views(plan, a, b, self.scratch)
        target = self.scratch.c if self.scratch.c is not None else out
        self._inner = inner(a_in, b_in, target)

    def __call__(self) -> torch.Tensor:
        repair(self.plan, self.a, self.b, self.scratch, self.out)
        self._inner()
        if self.scratch.c is not None:
            copy_back(self.scratch.c, self.out)
        return self.out
