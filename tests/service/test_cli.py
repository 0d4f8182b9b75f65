"""The command line: bad input is refused before anything starts, with the field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app


def test_tune_refuses_a_bad_size_naming_the_option() -> None:
    result = CliRunner().invoke(app, ["tune", "--m", "0", "--trials", "2"])
    assert result.exit_code == 2
    assert "--m" in result.output and "positive integer" in result.output


def test_commands_are_listed() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("tune", "serve", "worker", "submit", "status", "best"):
        assert command in result.output


def test_tune_refuses_an_fp8_problem_breaking_a_rule_naming_the_option() -> None:
    runner = CliRunner()
    row_b = runner.invoke(app, ["tune", "--dtype", "fp8_e4m3", "--layout-b", "row"])
    assert row_b.exit_code == 2
    assert "--layout-b" in row_b.output and "column-major" in row_b.output
    ragged = runner.invoke(app, ["tune", "--dtype", "fp8_e4m3", "--k", "100"])
    assert ragged.exit_code == 2
    assert "--k" in ragged.output and "multiple of 16" in ragged.output


def test_tune_refuses_an_impossible_attention_naming_the_option() -> None:
    runner = CliRunner()
    head = runner.invoke(app, ["tune", "--kind", "attention", "--d", "96"])
    assert head.exit_code == 2
    assert "--d" in head.output and "head dimension 96" in head.output
    gqa = runner.invoke(app, ["tune", "--kind", "attention", "--heads", "6", "--kv-heads", "4"])
    assert gqa.exit_code == 2
    assert "--kv-heads" in gqa.output and "multiple of" in gqa.output
    decode = runner.invoke(app, ["tune", "--kind", "attention", "--s-q", "64", "--backends",
                                 "triton_decode"])
    assert decode.exit_code == 2
    assert "--backends" in decode.output and "short queries" in decode.output


@pytest.mark.slow
def test_tune_fp8_on_the_cpu_ends_with_the_library_and_says_why(tmp_path: Path) -> None:
    import torch

    one, z = torch.ones(()), torch.zeros(16, 16).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(z, z.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        pytest.skip("this torch has no CPU torch._scaled_mm")
    out = tmp_path / "result.json"
    # no --layout-b: fp8 defaults to a column-major B
    result = CliRunner().invoke(app, [
        "tune", "--m", "64", "--n", "48", "--k", "96", "--dtype", "fp8_e4m3", "--trials", "2",
        "--db", f"sqlite:///{tmp_path / 'ks.db'}", "--interpret", "--mode", "force",
        "--json", str(out)])
    assert result.exit_code == 0, result.output
    job = json.loads(out.read_text())["job"]
    assert job["problem_key"] == "gemm:b1:m64:n48:k96:fp8_e4m3:bf16:fp32:rc"
    assert job["decision"]["chosen"] == "library" and job["best"]["backend"] == "cublas"
    assert "no fp8_e4m3 Triton template" in job["decision"]["rationale"]
