"""The quantisation micro-benchmark (``scripts/bench/quant.py``) on a CPU: its options, its
refusal without a GPU, and one tiny shape through its check-then-time path in the interpreter
(with a stand-in timer), so a run on the GPU host fails only on what needs the GPU."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from scripts.bench import quant
from scripts.bench.__main__ import main


def _args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    quant.add_arguments(ap)
    return ap.parse_args(["--out", str(tmp_path / "q.json"), *extra])


def test_options_parse_with_the_defaults_the_h100_run_uses(tmp_path: Path) -> None:
    args = _args(tmp_path, "--bandwidth-gbs", "3350")
    assert args.shapes == [(4096, 4096, 4096), (8192, 8192, 8192)]
    assert args.configs[0] == {"mode": "two_pass", "block_r": 32, "block_k": 128,
                               "num_warps": 4, "stages": None}
    assert {c["mode"] for c in args.configs} == set(quant.MODES)
    assert args.bandwidth_gbs == 3350.0
    # both operands of 4096^3 read once (bf16) and written once (fp8): about 32 us at 3 TB/s
    bound = quant.traffic_bytes(4096, 4096, 4096, 2) / 3.0e12 * 1e6
    assert 32.0 < bound < 34.0


@pytest.mark.parametrize(("configs", "words"), [
    ("panel:16x256x4", "first configuration is the reference"),
    ("two_pass:16x256x4,fused:8x8x4", "the mode must be one of"),
    ("two_pass:16x256x4x2", "two_pass takes RxKxW"),
    ("two_pass:16x250x4", "K=250 is not a power of two"),
])
def test_bad_configs_are_refused_by_name(configs: str, words: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        quant.parse_configs(configs)


def test_without_a_gpu_it_says_so_and_fails(tmp_path: Path, monkeypatch: Any,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["quant", "--out", str(tmp_path / "q.json")]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "q.json").exists()


def test_a_tiny_shape_is_checked_then_timed(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    args = _args(tmp_path, "--configs",
                 "two_pass:8x32x4,panel:8x32x4x2,panel_x2:16x16x4x1,two_pass:4x16x4")
    timed: list[Any] = []

    def timer(call: Any, **kw: Any) -> list[float]:
        timed.append(call)
        return [0.010, 0.009, 0.012]  # ms

    rows = quant.measure_shape(24, 40, 48, args.configs, args, device="cpu", timer=timer)
    assert [r["config"] for r in rows] == ["two_pass:8x32x4", "panel:8x32x4x2",
                                           "panel_x2:16x16x4x1", "two_pass:4x16x4"]
    assert all(r["equal"] for r in rows) and len(timed) == 4
    assert rows[1]["programs"] >= 1 and rows[0].get("programs") is None
    assert rows[0]["us"] == pytest.approx(10.0)
    assert rows[0]["share_of_bound"] == pytest.approx(rows[0]["bound_us"] / 10.0)
    text = quant.render_rows(rows)
    assert "| 24x40x48 | panel:8x32x4x2 |" in text and "10.0 | 9.0-12.0 |" in text
    json.dumps(rows)  # what run writes to --out


def test_a_configuration_that_differs_is_reported_not_timed(tmp_path: Path,
                                                            monkeypatch: Any) -> None:
    from kernel_templates.gemm import fp8_quant

    real = fp8_quant.quantise_pair_panel

    def off_by_one_scale(*a: Any, **kw: Any) -> Any:
        qa, sa, qb, sb = real(*a, **kw)
        sa[0] *= 2
        return qa, sa, qb, sb

    monkeypatch.setattr(fp8_quant, "quantise_pair_panel", off_by_one_scale)
    args = _args(tmp_path, "--configs", "two_pass:8x32x4,panel:8x32x4x2")
    rows = quant.measure_shape(16, 16, 32, args.configs, args, device="cpu",
                               timer=lambda call, **kw: [0.01, 0.01, 0.01])
    assert rows[0]["equal"] and not rows[1]["equal"] and rows[1].get("us") is None
    assert "differ" in rows[1]["error"]
