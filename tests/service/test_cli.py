"""The command line: bad input is refused before anything starts, with the field named."""

from __future__ import annotations

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
