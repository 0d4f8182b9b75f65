"""Benchmark-child targets for ``IsolatedRunner`` tests: ``behave`` does what the candidate's
config says (``{"fake": "ok" | "hang" | "die" | "raise" | "sticky"}``)."""

from __future__ import annotations

import os
import time
from typing import Any

from search.types import Measurement, Status


def behave(candidate: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    what = candidate["config"].get("fake", "ok")
    if what == "hang":
        time.sleep(3600)
    if what == "die":
        os._exit(1)
    if what == "raise":
        raise RuntimeError("a bug in the target")
    if what == "sticky":
        return Measurement(status=Status.CRASHED, error="illegal memory access").to_dict()
    return Measurement(status=Status.OK, median_us=1.0, p20_us=1.0, p80_us=1.0, reps=1,
                       env={"pid": os.getpid(), "interpret": options.get("interpret"),
                            "env_interpret": os.environ.get("TRITON_INTERPRET")}).to_dict()


def registry_state(candidate: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """Report what the child's kernel registry holds (the plug-ins it imported register)."""
    import sys

    from kernel_templates import registry

    return Measurement(status=Status.OK, median_us=1.0, p20_us=1.0, p80_us=1.0, reps=1,
                       env={"kinds": sorted(registry.KINDS),
                            "toy_backends": list(registry.backends("toy_double")),
                            "modules": sorted(m for m in sys.modules if "toy_plugin" in m)}
                       ).to_dict()
