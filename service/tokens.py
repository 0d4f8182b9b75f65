"""Users' API tokens (``KS_API_TOKENS``) and named worker tokens (``KS_WORKER_TOKENS``), kept
only as SHA-256 digests.

The setting is a comma-separated list of ``name:token`` or ``name:token:admin`` entries, e.g.
``KS_API_TOKENS="alice:5f2c...:admin,bob:9a1e..."``. A name is what jobs record as their owner
(letters, digits, ``._-``); a token is at least 16 characters and holds no ``:`` or ``,``. The
raw tokens never leave :func:`parse_tokens`: a presented token is hashed and compared with each
digest in constant time (``hmac.compare_digest``).

``KS_WORKER_TOKENS`` lists ``name:token`` entries by the same rules (no ``admin``), one per
party running workers (a host, a team member); no two share a token. The name of the token a
worker registered with is its token identity: with more than one identity configured, a held
result is confirmed only by a worker of another identity (``service.plausibility``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["MIN_TOKEN_LENGTH", "UserToken", "digest", "match", "other_identity",
           "parse_tokens", "parse_worker_tokens", "same_secret"]

MIN_TOKEN_LENGTH = 16
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True)
class UserToken:
    """One user's token as the service keeps it: the owner name, the token's SHA-256 hex
    digest, and whether it may act on every user's jobs."""

    name: str
    sha256: str
    admin: bool = False

    def __repr__(self) -> str:  # the digest is not the token, but it need not be printed either
        return f"UserToken(name={self.name!r}, admin={self.admin})"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def parse_tokens(value: str | Iterable[str], setting: str = "KS_API_TOKENS",
                 admin: bool = True) -> tuple[UserToken, ...]:
    """``name:token[:admin]`` entries (a comma-separated string or a list) as digests; a
    malformed entry raises ``ValueError`` naming ``setting``, the entry's position and the
    rule, never the token. Without ``admin`` an entry is ``name:token`` only."""
    entries = value.split(",") if isinstance(value, str) else list(value)
    out: list[UserToken] = []
    for i, raw in enumerate(e.strip() for e in entries):
        if not raw:
            continue
        parts = raw.split(":")
        where = f"{setting} entry {i + 1}"
        if not admin and len(parts) != 2:
            raise ValueError(f"{where}: expected name:token")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "admin"):
            raise ValueError(f"{where}: expected name:token or name:token:admin")
        name, token = parts[0], parts[1]
        if not _NAME.match(name):
            raise ValueError(f"{where}: the name must be 1-64 letters, digits, '.', '_' or '-'")
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(f"{where} ({name}): the token must be at least "
                             f"{MIN_TOKEN_LENGTH} characters")
        if any(t.name == name for t in out):
            raise ValueError(f"{where}: the name {name!r} is listed twice")
        out.append(UserToken(name, digest(token), admin=len(parts) == 3))
    return tuple(out)


def parse_worker_tokens(value: str | Iterable[str]) -> tuple[UserToken, ...]:
    """``KS_WORKER_TOKENS``: ``name:token`` entries as digests, by :func:`parse_tokens`'s
    rules; two names with one token are refused too (they would be one identity)."""
    out = parse_tokens(value, "KS_WORKER_TOKENS", admin=False)
    for i, t in enumerate(out):
        twin = next((u for u in out[:i] if u.sha256 == t.sha256), None)
        if twin is not None:
            raise ValueError(f"KS_WORKER_TOKENS: {twin.name!r} and {t.name!r} have the same "
                             "token; each identity needs its own")
    return out


def other_identity(recorded: str | None, presented: str | None) -> bool:
    """Whether a worker that registered with a token of identity ``recorded`` (None: no
    token) is addressed with a token of another identity (``presented``; None: no token
    configured, so nothing to compare)."""
    return presented is not None and recorded not in (None, presented)


def same_secret(secret: str | None, sha256: str) -> bool:
    """Whether ``secret`` (a worker's, as presented) hashes to ``sha256``, compared in constant
    time; a missing or empty secret never does."""
    return bool(secret) and hmac.compare_digest(digest(secret or "").encode(), sha256.encode())


def match(tokens: Iterable[UserToken], presented: str) -> UserToken | None:
    """The user whose token ``presented`` is, or None; every digest is compared (constant
    time each), so the answer's timing does not say which entry came close."""
    seen = digest(presented).encode()
    found = None
    for t in tokens:
        if hmac.compare_digest(seen, t.sha256.encode()):
            found = t
    return found
