"""Domain errors of the service and how each becomes an HTTP answer.

``service.flow`` raises these (it knows nothing of HTTP); ``service.app`` maps them to 4xx.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ServiceError(Exception):
    """Base of the errors a client caused; ``status_code`` is the HTTP answer."""

    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def detail(self) -> Any:
        return self.message

    def headers(self) -> dict[str, str] | None:
        return None


class NotFound(ServiceError):
    status_code = 404


class Conflict(ServiceError):
    status_code = 409


class Gone(ServiceError):
    status_code = 410


class Unauthorized(ServiceError):
    """No credentials, or ones the service does not know: 401 with ``WWW-Authenticate``."""

    status_code = 401

    def headers(self) -> dict[str, str] | None:
        return {"WWW-Authenticate": "Bearer"}


class Forbidden(ServiceError):
    """Known credentials that do not allow this (another owner's job, another worker's id)."""

    status_code = 403


class TooMany(ServiceError):
    """A limit is reached: 429 with ``Retry-After``."""

    status_code = 429

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str] | None:
        return {"Retry-After": str(self.retry_after_s)}


class InvalidInput(ServiceError):
    """A value that breaks a rule; answered like FastAPI's own validation errors (422)."""

    status_code = 422

    def __init__(self, loc: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.loc = list(loc)

    def detail(self) -> Any:
        return [{"loc": self.loc, "msg": self.message, "type": "value_error"}]
