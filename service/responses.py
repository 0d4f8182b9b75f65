"""The error answers routes document in the OpenAPI schema: each status with what it means and
the body every error has (``{"detail": ...}``: a message, or a list naming fields and rules)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["READ", "WORKER", "WRITE", "ErrorOut", "answers"]


class ErrorOut(BaseModel):
    """An error: a sentence naming the rule, or (422) a list of ``{loc, msg, type}``."""

    detail: str | list[dict[str, Any]] = Field(
        description="what was wrong and the rule it broke")


_MEANING = {
    400: "the request could not be read",
    401: "a token is needed (Authorization: Bearer <token>) or the one sent is unknown",
    403: "the token is known but may not do this (another owner's job, another worker's id)",
    404: "no such resource",
    409: "the resource is not in a state that allows this",
    410: "the lease expired; its candidates went back to the queue",
    413: "the request body is over KS_MAX_BODY_BYTES",
    422: "a value breaks a rule: the answer names the field and the rule",
    429: "a limit is reached (see Retry-After)",
    503: "the database is unreachable (see Retry-After)",
}

#: What every read may answer besides 200, and every write (user or worker).
READ = (401, 403, 422, 503)
WRITE = (400, 401, 403, 422, 503)
WORKER = (400, 401, 403, 404, 413, 422, 503)


def answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each code with its meaning and the error body."""
    return {code: {"model": ErrorOut, "description": _MEANING[code]}
            for code in sorted(set(codes))}
