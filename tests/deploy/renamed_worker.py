"""``kernelsearch worker`` with its device registered under another GPU model name (tests only).

``python -m tests.deploy.renamed_worker MODEL worker --url ...``: the real CLI and worker loop,
the detected device (here the Triton interpreter) renamed to ``MODEL``, so that one machine can
play two GPU models whose measurements must never meet.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from search.types import Device
from workers import device as workers_device


def main() -> None:
    model = sys.argv.pop(1)
    detect = workers_device.detect_device

    def renamed(*args: Any, **kwargs: Any) -> Device:
        return dataclasses.replace(detect(*args, **kwargs), gpu_model=model)

    workers_device.detect_device = renamed  # looked up by the CLI's worker command at call time
    from service.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
