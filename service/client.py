"""A small typed client of the kernelsearch API (httpx only: workers and users import it).

Connection errors, timeouts, 5xx and 429 are retried with jittered exponential back-off (a
``Retry-After`` the server sends is honoured); any other 4xx raises :class:`KernelSearchError`
at once with the server's message. :func:`backoff` is the delay rule, shared with the worker
loop. Tests pass a FastAPI
``TestClient`` as ``http_client`` (it is an ``httpx.Client``) or an ``httpx`` transport.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx

__all__ = ["KernelSearchClient", "KernelSearchConnectionError", "KernelSearchError", "backoff",
           "retryable"]


def backoff(attempt: int, base_s: float, cap_s: float, rng: random.Random | None = None
            ) -> float:
    """Seconds to wait before retry ``attempt`` (0, 1, ...): ``base_s * 2**attempt`` capped at
    ``cap_s``, drawn between half of that and all of it ("equal jitter"), so clients cut off
    together do not come back together."""
    ceiling = min(cap_s, base_s * (2 ** min(attempt, 32)))
    return ceiling / 2 + (rng or random).uniform(0.0, ceiling / 2)


def _describe(detail: Any) -> str:
    if isinstance(detail, list):  # FastAPI validation errors: name each field and rule
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(x) for x in item.get("loc", ()) if x != "body")
                parts.append(f"{loc}: {item.get('msg')}" if loc else str(item.get("msg")))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


class KernelSearchError(Exception):
    """The service answered with an error: ``status_code`` and its ``detail``."""

    def __init__(self, status_code: int, detail: Any) -> None:
        super().__init__(f"HTTP {status_code}: {_describe(detail)}")
        self.status_code = status_code
        self.detail = detail


class KernelSearchConnectionError(KernelSearchError, ConnectionError):
    """The service could not be reached after all retries (reported as status 503)."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message)


def retryable(exc: BaseException) -> bool:
    """Whether retrying later may succeed: the service unreachable, a 5xx or a 429."""
    return isinstance(exc, KernelSearchError) and (exc.status_code >= 500
                                                   or exc.status_code == 429)


class KernelSearchClient:
    """Calls the /v1 API; every method returns the decoded JSON answer."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0,
                 retries: int = 3, transport: httpx.BaseTransport | None = None, *,
                 http_client: httpx.Client | None = None, backoff_s: float = 0.5,
                 max_backoff_s: float = 30.0, sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None, worker_token: str | None = None,
                 worker_secret: str | None = None) -> None:
        """``token``: a user's token (``KS_TOKEN``), sent as the bearer of user calls;
        ``worker_token`` (``KS_WORKER_TOKEN``) that of worker calls (``token`` when unset);
        ``worker_secret``: this worker's own secret (``X-Worker-Secret``), which
        :meth:`register_worker` also takes from the service's first answer."""
        self.base_url = base_url.rstrip("/")
        self.retries = max(0, retries)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._sleep = sleep
        self._rng = rng
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        worker_bearer = worker_token or token
        self._worker_bearer = ({"Authorization": f"Bearer {worker_bearer}"} if worker_bearer
                               else {})
        self.worker_secret = worker_secret
        self._own = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout, transport=transport)

    # -- jobs -----------------------------------------------------------------------------------
    def submit_job(self, problem: dict[str, Any], budget: dict[str, Any] | None = None,
                   backends: list[str] | None = None, gpu: str | None = None,
                   seed: int | None = None, policy: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
        """Submit a tuning job; ``policy`` steers the decision loop (``threshold``,
        ``force_custom``, ``full_search``, ``allow_tf32`` ...)."""
        body: dict[str, Any] = {"problem": problem}
        for key, value in (("budget", budget), ("backends", backends), ("gpu", gpu),
                           ("seed", seed), ("policy", policy)):
            if value is not None:
                body[key] = value
        return self._request("POST", "/v1/jobs", json=body, wait_on_limits=False)

    def get_job(self, job_id: int) -> dict[str, Any]:
        return self._request("GET", f"/v1/jobs/{int(job_id)}")

    def list_jobs(self, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        return self._request("GET", "/v1/jobs", params={"limit": limit, "offset": offset})

    def cancel_job(self, job_id: int) -> dict[str, Any]:
        return self._request("POST", f"/v1/jobs/{int(job_id)}/cancel")

    def calibrations(self, gpu: str | None = None) -> dict[str, Any]:
        """Measured device peaks per GPU model, newest first."""
        return self._request("GET", "/v1/calibrations", params={"gpu": gpu} if gpu else None)

    def decision(self, problem_id: int, gpu: str | None = None) -> dict[str, Any] | None:
        """The decision in force for a problem (None before the first one)."""
        params = {"gpu": gpu} if gpu else None
        try:
            return self._request("GET", f"/v1/problems/{int(problem_id)}/decision",
                                 params=params)
        except KernelSearchError as exc:
            if exc.status_code == 404:
                return None
            raise

    def decisions(self, problem_id: int, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        """The history of a problem's decisions, newest first."""
        return self._request("GET", f"/v1/problems/{int(problem_id)}/decisions",
                             params={"limit": limit, "offset": offset})

    def reopen(self, problem_id: int, **body: Any) -> dict[str, Any]:
        """Decide again: a new job for the problem (``budget=``, ``policy=``, ``gpu=`` ...)."""
        return self._request("POST", f"/v1/problems/{int(problem_id)}/reopen",
                             json={k: v for k, v in body.items() if v is not None},
                             wait_on_limits=False)

    # -- results --------------------------------------------------------------------------------
    def best(self, **query: Any) -> dict[str, Any] | None:
        """The best configuration of a problem (``m=, n=, k=, dtype=, gpu=`` ...); None if the
        problem was never tuned there."""
        params = {k: v for k, v in query.items() if v is not None}
        try:
            return self._request("GET", "/v1/best", params=params)
        except KernelSearchError as exc:
            if exc.status_code == 404:
                return None
            raise

    def problems(self, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        return self._request("GET", "/v1/problems", params={"limit": limit, "offset": offset})

    def trials(self, problem_id: int, limit: int = 50, offset: int = 0,
               gpu: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if gpu is not None:
            params["gpu"] = gpu
        return self._request("GET", f"/v1/problems/{int(problem_id)}/trials", params=params)

    # -- workers --------------------------------------------------------------------------------
    def register_worker(self, name: str, device: dict[str, Any],
                        catalogues: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """Register a worker with what it declares of its backends, by ``"<kind>/<backend>"``
        (``"gemm/cutlass"``: the operations it can build,
        ``search.kinds.gemm.cutlass_catalogue.Catalogue.encode``)."""
        body: dict[str, Any] = {"name": name, "device": device}
        if catalogues:
            body["catalogues"] = catalogues
        reply = self._request("POST", "/v1/workers/register", json=body,
                              headers=self._worker_headers())
        if reply.get("worker_secret"):
            self.worker_secret = str(reply["worker_secret"])
        return reply  # type: ignore[no-any-return]

    def lease(self, worker_id: int, max_candidates: int) -> dict[str, Any]:
        return self._request("POST", f"/v1/workers/{int(worker_id)}/lease",
                             json={"max_candidates": max_candidates},
                             headers=self._worker_headers())

    def renew(self, worker_id: int, lease_id: str) -> dict[str, Any]:
        lease = quote(str(lease_id), safe="")
        return self._request("POST", f"/v1/workers/{int(worker_id)}/leases/{lease}/renew",
                             headers=self._worker_headers())

    def report(self, worker_id: int, lease_id: str, results: list[dict[str, Any]]
               ) -> dict[str, Any]:
        return self._request("POST", f"/v1/workers/{int(worker_id)}/report",
                             json={"lease_id": lease_id, "results": results},
                             headers=self._worker_headers())

    def _worker_headers(self) -> dict[str, str]:
        secret = {"X-Worker-Secret": self.worker_secret} if self.worker_secret else {}
        return {**self._worker_bearer, **secret}

    # -- plumbing -------------------------------------------------------------------------------
    def close(self) -> None:
        if self._own:
            self._http.close()

    def __enter__(self) -> KernelSearchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, *, json: Any = None,
                 params: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None, wait_on_limits: bool = True) -> Any:
        """Send one call, retrying what may pass later; ``wait_on_limits=False``: a 429 (a
        full queue: minutes away) is raised at once, so a person hears of it now."""
        url = self.base_url + path
        attempt = 0
        while True:
            try:
                response = self._http.request(method, url, json=json, params=params,
                                              headers=self._headers if headers is None
                                              else headers)
            except httpx.TransportError as exc:  # connection refused/reset, timeouts
                if attempt >= self.retries:
                    raise KernelSearchConnectionError(
                        f"cannot reach {self.base_url}: {exc!r}") from exc
                self._sleep(self._delay(attempt, None))
                attempt += 1
                continue
            status = response.status_code
            if status < 400:
                return response.json()
            if (status >= 500 or (status == 429 and wait_on_limits)) and attempt < self.retries:
                self._sleep(self._delay(attempt, response.headers.get("Retry-After")))
                attempt += 1
                continue
            raise KernelSearchError(status, _detail(response))

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        delay = backoff(attempt, self.backoff_s, self.max_backoff_s, self._rng)
        if retry_after is not None:
            try:
                delay = max(delay, min(float(retry_after), 60.0))
            except ValueError:
                pass
        return delay


def _detail(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        return response.text or response.reason_phrase
    return body.get("detail", body) if isinstance(body, dict) else body
