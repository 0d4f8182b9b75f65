"""The one benchmark entry point: ``python -m scripts.bench`` names every benchmark, and each
subcommand parses its options (nothing runs: these are GPU runs)."""

from __future__ import annotations

import pytest

from scripts.bench.__main__ import COMMANDS, main


def test_every_benchmark_is_a_subcommand() -> None:
    assert set(COMMANDS) == {"gemm", "agent", "attention", "attention-sweep", "precision",
                             "fp8-error", "cutlass-cache", "quant", "lowered", "rerun"}
    for module in COMMANDS.values():
        assert callable(module.add_arguments) and callable(module.run)


@pytest.mark.parametrize("command", ["gemm", "agent", "attention", "attention-sweep",
                                     "precision", "fp8-error", "cutlass-cache", "quant",
                                     "lowered"])
def test_each_subcommand_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert "--shapes" in capsys.readouterr().out


def test_the_cache_builder_needs_a_cache_directory() -> None:
    with pytest.raises(SystemExit) as done:
        main(["cutlass-cache", "--max-ops", "2"])
    assert done.value.code == 2


def test_the_lowered_benchmark_reads_its_tiles() -> None:
    from scripts.bench.lowered import parse_tiles

    first, second = parse_tiles("128x256x128x8x3pf,64x64x128x4x2")
    assert first == dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_warps=8,
                         num_stages=3, PERSISTENT=1, TMA_STORE=1, FAST_ACC=1)
    assert second["PERSISTENT"] == 0 and second["FAST_ACC"] == 0 and second["num_stages"] == 2
    with pytest.raises(Exception, match="BMxBNxBKxWARPSxSTAGES"):
        parse_tiles("128x256x128")
