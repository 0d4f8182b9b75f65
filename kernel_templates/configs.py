"""The rules every kernel template's configuration check starts with (``InvalidConfig`` when
broken): the keys it must have and may have, and sizes that must be powers of two."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kernel_templates.errors import InvalidConfig

__all__ = ["check_keys", "check_powers_of_two"]


def check_keys(config: Mapping[str, Any], required: Iterable[str],
               optional: Iterable[str] = ()) -> None:
    """Every ``required`` key present, no key outside ``required`` and ``optional``."""
    required = tuple(required)
    missing = [k for k in required if k not in config]
    if missing:
        raise InvalidConfig(f"config lacks {missing}")
    unknown = sorted(set(config) - set(required) - set(optional))
    if unknown:
        raise InvalidConfig(f"unknown config keys {unknown}")


def check_powers_of_two(config: Mapping[str, int], keys: Iterable[str]) -> None:
    """Each of ``keys`` a positive power of two."""
    for k in keys:
        v = config[k]
        if v <= 0 or v & (v - 1):
            raise InvalidConfig(f"{k}={v} is not a power of two")
