"""The probes' shared timing (scripts/bench/checked.py), with a fake bench: ``interleaved``
times every name once per round, in turn, and its row carries the median of its rounds, their
range and the rounds themselves; ``fastest`` times each name once and names the finalists;
``run_probe`` keeps the rows of a probe that fails, ``probe_mode`` names the modes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from scripts.bench.checked import fastest, interleaved, probe_mode, run_probe


def test_rounds_interleave_the_names_and_rows_carry_the_median_and_range() -> None:
    seen: list[str] = []
    times = {"a": iter([5.0, 1.0, 3.0]), "b": iter([2.0, 2.5, 9.0])}

    def bench(fns):
        name = fns[0]()  # each fake call returns its name
        seen.append(name)
        return SimpleNamespace(median_us=next(times[name]))

    calls = {"a": [lambda: "a"], "b": [lambda: "b"]}
    rows: list[dict] = []
    interleaved(calls, bench, "8x8x8", rows, rounds=3, prefix="interleaved ")
    assert seen == ["a", "b", "a", "b", "a", "b"]  # round by round, not name by name
    assert rows == [
        {"shape": "8x8x8", "name": "interleaved a", "us": 3.0, "min_us": 1.0, "max_us": 5.0,
         "rounds": [5.0, 1.0, 3.0]},
        {"shape": "8x8x8", "name": "interleaved b", "us": 2.5, "min_us": 2.0, "max_us": 9.0,
         "rounds": [2.0, 2.5, 9.0]},
    ]


def test_fastest_times_each_name_once_and_names_the_finalists() -> None:
    times = {"a": 5.0, "b": 1.0, "c": 3.0}
    seen: list[str] = []

    def bench(fns):
        name = fns[0]()
        seen.append(name)
        return SimpleNamespace(median_us=times[name])

    rows: list[dict] = []
    calls = {name: [lambda name=name: name] for name in times}
    assert fastest(calls, bench, "8x8x8", rows, top=2) == ["b", "c"]
    assert seen == ["a", "b", "c"]
    assert rows == [{"shape": "8x8x8", "name": n, "us": times[n], "pass": 1}
                    for n in ("b", "c", "a")]


def test_run_probe_keeps_what_a_failing_probe_measured(tmp_path) -> None:
    rows: list[dict] = []

    def main() -> None:
        rows.append({"name": "measured"})
        raise RuntimeError("cut short")

    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="cut short"):
        run_probe(main, str(out), "probe.json", rows)
    assert json.loads((out / "probe.json").read_text()) == [{"name": "measured"}]


def test_probe_mode_defaults_to_the_first_and_names_the_modes() -> None:
    assert probe_mode(["p"], "p", ("pass1", "wide")) == "pass1"
    assert probe_mode(["p", "wide"], "p", ("pass1", "wide")) == "wide"
    with pytest.raises(SystemExit, match=r"usage: p \[pass1\|wide\], got 'deep'"):
        probe_mode(["p", "deep"], "p", ("pass1", "wide"))
