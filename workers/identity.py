"""A worker's identity across restarts: the secret the service issued at its first
registration, kept in a file under the worker's state directory (``KS_STATE_DIR``).

The file is per service and worker name, readable by its owner only, so a restarted worker
re-registers under its name with its secret, and nobody else can take that name over.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

__all__ = ["SecretFile", "default_state_dir"]


def default_state_dir() -> Path:
    """``~/.cache/kernelsearch/worker``."""
    return Path.home() / ".cache" / "kernelsearch" / "worker"


class SecretFile:
    """Where the secret of worker ``name`` of ``service`` is kept: the service's URL, or for
    the embedded service (whose port changes every start) its database URL."""

    def __init__(self, state_dir: Path, service: str, name: str) -> None:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100] or "worker"
        where = hashlib.sha256(service.rstrip("/").encode()).hexdigest()[:12]
        self.path = Path(state_dir) / f"{safe}@{where}.secret"

    def load(self) -> str | None:
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return None
        return text or None

    def save(self, secret: str) -> None:
        """Write the secret (owner-only permissions), replacing the file atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret)
        os.replace(tmp, self.path)
