"""Who may call what: users' tokens for writes (and reads, unless public), the worker token for
worker endpoints, and each worker's own secret for its id.

- **Users** (``KS_API_TOKENS``, :mod:`service.tokens`): with tokens configured every write
  needs ``Authorization: Bearer <token>`` (401 without one or with an unknown one); the
  caller's name is the owner a job records, and only the owner or an admin token may cancel
  it or re-open its problem (403). Reads are public unless ``KS_PUBLIC_READS=false``. With no
  tokens configured the service is open (the embedded single-user default) and says so at
  start-up.
- **Workers** (``KS_WORKER_TOKEN``, ``KS_WORKER_TOKENS``): worker endpoints accept only a
  worker token; user endpoints never accept one (they are not among the users' digests). Each
  worker token is a token identity (its name; ``default`` for ``KS_WORKER_TOKEN``): a worker
  records the one it registered with, and its later calls need a token of that identity (403
  otherwise). With more than one identity, a held result is confirmed only by a worker of
  another identity (``service.plausibility``).
- **A worker's identity**: its first registration issues a secret (returned once, stored as a
  digest); re-registering its name, leasing, renewing and reporting under its id need it as
  ``X-Worker-Secret`` (403 otherwise), so nobody takes over a registered worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Path
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from db import workers
from db.records import WorkerRecord
from service.deps import FlowDep, SettingsDep
from service.errors import Forbidden, Unauthorized
from service.settings import ServiceSettings
from service.tokens import UserToken, match, other_identity, same_secret

__all__ = ["Caller", "ReadAuth", "UserDep", "WorkerAuth", "WorkerCheck", "WorkerIdentity",
           "WorkerSecretAuth", "may_act_on", "warn_if_open", "worker_check",
           "worker_secret_header"]

log = logging.getLogger("kernelsearch.auth")

_user_bearer = HTTPBearer(auto_error=False, scheme_name="UserToken",
                          description="a user's token from KS_API_TOKENS (name:token[:admin])")
_worker_bearer = HTTPBearer(auto_error=False, scheme_name="WorkerToken",
                            description="a worker token: KS_WORKER_TOKEN or one of "
                                        "KS_WORKER_TOKENS (name:token)")
worker_secret_header = APIKeyHeader(name="X-Worker-Secret", auto_error=False,
                              scheme_name="WorkerSecret",
                              description="the secret this worker's first registration "
                                          "returned (worker_secret)")

#: The user behind a request; None when the service runs without tokens (open).
Caller = UserToken | None


def _user(settings: ServiceSettings, creds: HTTPAuthorizationCredentials | None) -> Caller:
    if not settings.api_tokens:
        return None
    if creds is None or not creds.credentials:
        raise Unauthorized("this needs a user token: send 'Authorization: Bearer <token>' "
                           "with a token of KS_API_TOKENS")
    user = match(settings.api_tokens, creds.credentials)
    if user is None:
        raise Unauthorized("unknown token: it is none of KS_API_TOKENS (the worker token is "
                           "not a user token)")
    return user


async def user_caller(settings: SettingsDep, creds: Annotated[
        HTTPAuthorizationCredentials | None, Depends(_user_bearer)]) -> Caller:
    """A write's caller: with tokens configured, a known user token or a 401."""
    return _user(settings, creds)


async def read_caller(settings: SettingsDep, creds: Annotated[
        HTTPAuthorizationCredentials | None, Depends(_user_bearer)]) -> Caller:
    """A read's caller: anyone while reads are public, else as :func:`user_caller`."""
    if settings.public_reads:
        return None
    return _user(settings, creds)


UserDep = Annotated[Caller, Depends(user_caller)]
ReadAuth = Depends(read_caller)


def may_act_on(caller: Caller, owner: str | None) -> bool:
    """Whether ``caller`` may change what ``owner`` made: the owner, an admin, or anyone while
    the service is open."""
    return caller is None or caller.admin or (owner is not None and caller.name == owner)


async def require_worker_token(settings: SettingsDep, creds: Annotated[
        HTTPAuthorizationCredentials | None, Depends(_worker_bearer)]) -> str | None:
    """When worker tokens are configured, worker endpoints need ``Authorization: Bearer
    <token>`` with one of them (a user's token is refused); the token's identity (its name),
    or None while worker endpoints are open."""
    identities = settings.worker_identities
    if not identities:
        return None
    found = match(identities, creds.credentials) if creds is not None else None
    if found is None:
        raise Unauthorized("worker endpoints need 'Authorization: Bearer <token>' with a "
                           "worker token (KS_WORKER_TOKEN or one of KS_WORKER_TOKENS)")
    return found.name


WorkerAuth = Depends(require_worker_token)
#: The token identity of a worker call (None: worker endpoints are open).
WorkerIdentity = Annotated[str | None, Depends(require_worker_token)]


def require_worker_secret(flow: FlowDep,
                          worker_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
                          secret: Annotated[str | None, Depends(worker_secret_header)],
                          identity: WorkerIdentity) -> None:
    """A registered worker's id is used only with its secret (``X-Worker-Secret``) and a token
    of the identity it registered with."""
    with flow.db.read_session() as s:
        worker = workers.get_worker(s, worker_id)
    if worker is not None:  # unknown: the route answers 404
        worker_check(secret, identity)(worker)


WorkerSecretAuth = Depends(require_worker_secret)


def worker_check(secret: str | None, identity: str | None = None
                 ) -> Callable[[WorkerRecord], None]:
    """The check that a call under a worker's id comes with that worker's secret and, where
    the worker recorded one, a token of its identity (``identity``: the call's), for ``Flow``
    to run on the worker it reads anyway (lease and report: no read of its own)."""

    def check(worker: WorkerRecord) -> None:
        if worker.secret_sha256 is not None and not same_secret(secret, worker.secret_sha256):
            raise Forbidden(f"worker {worker.id} acts only with its own secret: send the "
                            "worker_secret its first registration returned as X-Worker-Secret")
        if other_identity(worker.token_name, identity):
            raise Forbidden(f"worker {worker.id} registered with the worker token "
                            f"{worker.token_name!r}; this call's token is {identity!r}: call "
                            "with the token it registered with")
    return check


async def _worker_checker(secret: Annotated[str | None, Depends(worker_secret_header)],
                          identity: WorkerIdentity) -> Callable[[WorkerRecord], None]:
    return worker_check(secret, identity)


#: A route's ``worker_check`` of the request's ``X-Worker-Secret``, for ``Flow`` to run.
WorkerCheck = Annotated[Callable[[WorkerRecord], None], Depends(_worker_checker)]


def warn_if_open(settings: ServiceSettings) -> None:
    """Say at start-up what is left unauthenticated."""
    if not settings.api_tokens:
        log.warning("no user tokens configured (KS_API_TOKENS): writes are unauthenticated; "
                    "fine for a single user on localhost, not for a shared service")
    identities = settings.worker_identities
    if not identities:
        log.warning("no worker token configured (KS_WORKER_TOKEN, KS_WORKER_TOKENS): anyone "
                    "who reaches the service can register a worker")
    if not settings.distinct_confirmers and settings.implausible_below > 0:
        log.warning("one worker token identity or none: a held result is confirmed by any "
                    "other worker name, so one token holder can confirm its own; collusion "
                    "protection needs a token per host (KS_WORKER_TOKENS)")
    elif settings.distinct_confirmers:
        log.info("worker token identities: %s; a held result is confirmed only by a worker "
                 "of another identity", ", ".join(t.name for t in identities))
    if not settings.public_reads and not settings.api_tokens:
        log.warning("KS_PUBLIC_READS=false has no effect without KS_API_TOKENS")
