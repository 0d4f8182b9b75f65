"""A configuration still being measured is not proposed again, within one ``propose`` call and
across calls (a new tuner on the same study, as the service makes one per lease).

The space is a FAKE one whose only configuration is ``{"x": 1}`` (a second value is added
where a second proposal must be possible), so the sampler is bound to ask for the in-flight
configuration again: only the in-flight rule keeps it out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from search.optimizer import Choice, SpaceTuner, close_storages
from search.types import config_key


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'inflight.db'}"
    close_storages()


def _tuner(url: str, values: tuple[int, ...]) -> SpaceTuner:
    return SpaceTuner(url, "fake-space", (Choice("x", values),), seed=0)


def test_in_flight_config_is_not_queued_twice_across_calls(url: str) -> None:
    first = _tuner(url, (1,)).propose(1, lambda c: None)
    assert [p.config for p in first] == [{"x": 1}]
    # Not recorded yet: still running. Asked again, the only configuration is in flight.
    again = _tuner(url, (1,))
    assert again.propose(1, lambda c: None) == []
    assert again.exhausted


def test_no_duplicate_among_outstanding_proposals(url: str) -> None:
    tuner = _tuner(url, (1, 2))
    outstanding = [p.config for p in tuner.propose(3, lambda c: None)]
    outstanding += [p.config for p in _tuner(url, (1, 2)).propose(2, lambda c: None)]
    keys = [config_key(c) for c in outstanding]
    assert sorted(keys) == sorted({config_key({"x": 1}), config_key({"x": 2})})
