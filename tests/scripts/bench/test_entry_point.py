"""The one benchmark entry point: ``python -m scripts.bench`` names every benchmark, and each
subcommand parses its options (nothing runs: these are GPU runs)."""

from __future__ import annotations

import pytest

from scripts.bench.__main__ import COMMANDS, main


def test_every_benchmark_is_a_subcommand() -> None:
    assert set(COMMANDS) == {"gemm", "agent", "attention", "attention-sweep", "precision",
                             "fp8-error", "cutlass-cache", "quant"}
    for module in COMMANDS.values():
        assert callable(module.add_arguments) and callable(module.run)


@pytest.mark.parametrize("command", ["gemm", "agent", "attention", "attention-sweep",
                                     "precision", "fp8-error", "cutlass-cache", "quant"])
def test_each_subcommand_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert "--shapes" in capsys.readouterr().out


def test_the_cache_builder_needs_a_cache_directory() -> None:
    with pytest.raises(SystemExit) as done:
        main(["cutlass-cache", "--max-ops", "2"])
    assert done.value.code == 2
