"""The fp8 quantisation-error benchmark (``scripts/bench/fp8_error.py``) on tiny shapes: its
scales and the figures the note on e4m3's error floor rests on (``docs/notes/kernels.md``)."""

from __future__ import annotations

import torch

from kernel_templates.accuracy import rel_error
from scripts.bench import fp8_error


def test_block_scales_keep_a_small_block_that_a_row_scale_flushes() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 256, generator=g)
    x[:, :128] *= 1e-6  # far below the row's amax / 2^(8+6): e4m3 subnormals or zero
    small = {s: rel_error(fp8_error.quantised(x, s)[:, :128], x[:, :128].double())
             for s in fp8_error.SCALES}
    assert small["block128"] < 0.05 < small["row"]


def test_every_distribution_and_scale_errs_as_e4m3_does() -> None:
    rows = fp8_error.measure(16, 16, 512, seeds=1)
    assert {(r["inputs"], r["scales"]) for r in rows} == {
        (d, s) for d in fp8_error.DISTRIBUTIONS for s in fp8_error.SCALES}
    for r in rows:  # per operand ~2.6%, the product ~sqrt(2) times that
        assert 0.015 < r["rel_error_a"] < 0.035 and 0.015 < r["rel_error_b"] < 0.035
        assert 0.02 < r["rel_error"] < 0.06
    text = fp8_error.render({"torch": "t", "date": "d"}, rows)
    assert "| 16x16x512 | uniform | block128 |" in text
