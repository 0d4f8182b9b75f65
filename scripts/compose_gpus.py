"""Write ``docker-compose.override.yml``: a worker service for each GPU of this host beyond GPU 0
(``docker-compose.yml`` has ``worker-gpu0``), each reserving its own device.

    python3 scripts/compose_gpus.py            # the GPUs nvidia-smi lists
    python3 scripts/compose_gpus.py --gpus 8   # or say how many
    docker compose up --build                  # reads the override on its own

One worker per GPU, each pinned by ``device_ids``: a reservation by ``count`` gives every
replica the same first GPUs, and two workers on one GPU would time their kernels against each
other. Standard library only: it runs on the GPU host before anything is installed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SERVICE = """\
  worker-gpu{i}:
    <<: *worker
    hostname: ${{KS_HOST:-host}}-gpu{i}
    deploy:
      resources:
        reservations:
          devices: [{{driver: nvidia, device_ids: ["{i}"], capabilities: [gpu]}}]
"""


def gpu_count() -> int:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise SystemExit("nvidia-smi not found: pass --gpus N")
    out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=True)
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def override(gpus: int) -> str:
    """The override's text: the worker anchor again (anchors do not cross files) and a service
    per GPU 1..gpus-1."""
    base = (ROOT / "docker-compose.yml").read_text()
    start = base.index("x-worker: &worker")
    end = base.index("\nservices:")
    services = "".join(SERVICE.format(i=i) for i in range(1, gpus))
    return ("# Written by scripts/compose_gpus.py: one worker per GPU beyond GPU 0.\n"
            + base[start:end].rstrip() + "\n\nservices:\n" + (services or "  {}\n"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, help="GPUs on this host (default: nvidia-smi -L)")
    parser.add_argument("--out", type=Path, default=ROOT / "docker-compose.override.yml")
    args = parser.parse_args(argv)
    gpus = args.gpus if args.gpus is not None else gpu_count()
    if gpus < 1:
        raise SystemExit("no GPU: the compose deployment needs one per worker")
    args.out.write_text(override(gpus))
    print(f"{args.out}: workers on GPUs 0..{gpus - 1}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
