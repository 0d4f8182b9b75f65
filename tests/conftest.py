"""Shared fixtures: a database URL per storage (SQLite file, Postgres) and the API over it;
Triton in its CPU interpreter where there is no GPU, and ``gpu`` tests skipped there.

``database_url`` is parametrised like Optuna's storage contract suite: every test that takes it
runs on SQLite and on Postgres. The Postgres database is reset before each test and the test is
skipped (with the reason) when the server does not answer.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from search.kinds.gemm import CUTLASS_TIER
from search.kinds.gemm.spec import GemmProblem
from search.limits import DeviceLimits
from search.types import Measurement
from service.app import create_app
from service.settings import ServiceSettings
from service.tuning import TunerFactory

try:
    import torch
except ImportError:  # an API-only environment (CI's step without the GPU stack)
    torch = None
HAS_CUDA = torch is not None and torch.cuda.is_available()
if not HAS_CUDA:
    # Must be set before triton is first imported, hence at conftest import.
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Workers started by tests (threads and processes) keep their secrets here, not in ~/.cache.
os.environ.setdefault("KS_STATE_DIR", tempfile.mkdtemp(prefix="ks-test-state-"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None and not HAS_CUDA:
        pytest.skip("needs an NVIDIA GPU")


@pytest.fixture
def device() -> str:
    """Where kernels run: the GPU when there is one, else the CPU (Triton interpreter)."""
    return "cuda" if HAS_CUDA else "cpu"


POSTGRES_SERVER = os.environ.get("KS_TEST_POSTGRES_URL",
                                 "postgresql+psycopg://postgres@127.0.0.1:5432/test")
#: Each test session works in a schema of its own, so two runs against one server (a developer's
#: and CI's) never drop each other's tables.
POSTGRES_SCHEMA = f"ks_test_{os.getpid()}"
POSTGRES_URL = (f"{POSTGRES_SERVER}{'&' if '?' in POSTGRES_SERVER else '?'}"
                f"options=-csearch_path%3D{POSTGRES_SCHEMA}")
_postgres_down: list[str] = []
_postgres_used: list[bool] = []  # a test reset the schema: drop it at the end


def _postgres_dsn() -> str:
    return POSTGRES_SERVER.replace("postgresql+psycopg://", "postgresql://", 1)


def _psycopg() -> Any:
    """psycopg, or a skip when it cannot load (a host with no libpq wrapper installed)."""
    try:
        import psycopg
    except ImportError as exc:
        _postgres_down.append(f"psycopg cannot load here ({str(exc).splitlines()[0]})")
        pytest.skip(_postgres_down[0])
    return psycopg


def _reset_postgres() -> None:
    if _postgres_down:
        pytest.skip(_postgres_down[0])
    psycopg = _psycopg()
    _postgres_used.append(True)
    try:
        with psycopg.connect(_postgres_dsn(), autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {POSTGRES_SCHEMA} CASCADE")
            conn.execute(f"CREATE SCHEMA {POSTGRES_SCHEMA}")
    except psycopg.OperationalError as exc:
        _postgres_down.append(f"PostgreSQL at {POSTGRES_SERVER} is unreachable ({exc}); "
                              "set KS_TEST_POSTGRES_URL or start the server")
        pytest.skip(_postgres_down[0])


@pytest.fixture(scope="session", autouse=True)
def _drop_postgres_schema() -> Iterator[None]:
    yield
    if _postgres_down or not _postgres_used:
        return
    import psycopg

    try:
        with psycopg.connect(_postgres_dsn(), autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {POSTGRES_SCHEMA} CASCADE")
    except psycopg.OperationalError:
        pass


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'kernelsearch.db'}"
    else:
        _reset_postgres()
        url = POSTGRES_URL
    yield url
    _release_optuna_storages()


def _release_optuna_storages() -> None:
    """search.optimizer keeps one Optuna storage per URL and process; between tests the schema
    is dropped, so the cached storage must go (and its pooled connections with it)."""
    from search.optimizer import close_storages

    close_storages()


@pytest.fixture
def release_optuna() -> Callable[[], None]:
    """Forget this process's Optuna storages, as a restarted service would."""
    return _release_optuna_storages


# -- fakes --------------------------------------------------------------------------------------
@dataclass
class FakeClock:
    """Injectable time: tests move it forward instead of sleeping."""

    now: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass(frozen=True)
class FakeProposal:
    trial_number: int
    config: dict[str, Any]


class FakeTuner:
    """FAKE stand-in for ``search.optimizer.GemmTuner``: proposes ``configs`` in order, skips the
    ones ``known`` has a measurement for, and remembers what it was told."""

    def __init__(self, configs: list[dict[str, Any]]) -> None:
        self.configs = configs
        self.exhausted = False
        self.trials = 0
        self._next = 0
        self.recorded: dict[int, Measurement] = {}
        self.reused: dict[int, Measurement] = {}
        self.abandoned: list[int] = []

    def propose(self, n: int, known: Callable[[dict[str, Any]], Measurement | None],
                budget: Any = None) -> list[FakeProposal]:
        self.budget = budget  # the CUTLASS search's CompileBudget, kept for tests to look at
        out: list[FakeProposal] = []
        while len(out) < n and self._next < len(self.configs):
            config, number = self.configs[self._next], self.trials
            self._next += 1
            self.trials += 1
            previous = known(config)
            if previous is not None:
                self.reused[number] = previous
                continue
            out.append(FakeProposal(number, config))
        self.exhausted = len(out) < n
        return out

    def record(self, trial_number: int, measurement: Measurement) -> None:
        self.recorded[trial_number] = measurement

    def abandon(self, trial_number: int) -> None:
        self.abandoned.append(trial_number)

    def stale_running(self, older_than_s: float) -> list[int]:
        """Trials proposed and neither told nor closed; the fake keeps no times, so only
        ``older_than_s <= 0`` (the background planner's "every one") returns them."""
        if older_than_s > 0:
            return []
        done = set(self.recorded) | set(self.abandoned) | set(self.reused)
        return [n for n in range(self.trials) if n not in done]


#: FAKE Triton configurations (the fake tuner hands these out; no GPU ever runs them).
FAKE_CONFIGS = [{"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "SPLIT_K": 1,
                 "num_warps": 4, "num_stages": s, "fake": i} for i, s in
                enumerate([2, 3, 4, 5, 6] * 8)]


@dataclass
class FakeTuners:
    """The fake tuner factory and every tuner it built: one per search tier, each handing out
    the FAKE configurations (tagged with the tier beyond the first, as real tiers differ in
    their keys); ``built`` keeps the first one per (problem key, GPU model). The CUTLASS
    search's tuner has no configurations (the search ends at once, exhausted) unless
    ``cutlass_configs`` lists some."""

    configs: list[dict[str, Any]] = field(default_factory=lambda: list(FAKE_CONFIGS))
    built: dict[tuple[str, str], FakeTuner] = field(default_factory=dict)
    tiers: dict[tuple[str, str, str | None], FakeTuner] = field(default_factory=dict)
    cutlass_configs: list[dict[str, Any]] = field(default_factory=list)

    def recorded(self) -> list[Measurement]:
        """Every measurement told to any tier's tuner."""
        return [m for t in self.tiers.values() for m in t.recorded.values()]

    def __call__(self, url: str, problem: GemmProblem, gpu_model: str, limits: DeviceLimits,
                 seed: int, tier: str | None = None, **tier_args: Any) -> FakeTuner:
        key = (problem.key(), gpu_model, tier)
        if key not in self.tiers and tier == CUTLASS_TIER:
            self.tiers[key] = FakeTuner(list(self.cutlass_configs))
        if key not in self.tiers:
            configs = (self.configs if tier in (None, "tiles")
                       else [{**c, "fake_tier": tier} for c in self.configs])
            self.tiers[key] = FakeTuner(configs)
            self.built.setdefault((problem.key(), gpu_model), self.tiers[key])
        return self.tiers[key]


# -- the API ------------------------------------------------------------------------------------
@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake_tuners() -> FakeTuners:
    return FakeTuners()


@pytest.fixture
def settings(database_url: str) -> ServiceSettings:
    return ServiceSettings(database_url=database_url, lease_seconds=60, window=4,
                           max_attempts=3, default_max_trials=8)


@pytest.fixture
def make_app(clock: FakeClock, fake_tuners: FakeTuners) -> Iterator[Callable[..., FastAPI]]:
    """Builds apps (fake tuner and clock unless told otherwise) and closes them afterwards."""
    apps: list[FastAPI] = []

    def make(settings: ServiceSettings, tuner_factory: TunerFactory | None = None,
             real_clock: bool = False) -> FastAPI:
        app = create_app(settings, tuner_factory=tuner_factory or fake_tuners,
                         clock=None if real_clock else clock)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.state.flow.close()


@pytest.fixture
def app(make_app: Callable[..., FastAPI], settings: ServiceSettings) -> FastAPI:
    return make_app(settings)


def _keeps_worker_secrets(http: TestClient, by_id: dict[str, str], by_name: dict[str, str]
                          ) -> TestClient:
    pattern = re.compile(r"^/v1/workers/(\d+)/")

    def attach(request: httpx.Request) -> None:
        if "x-worker-secret" in request.headers:
            return
        found = pattern.match(request.url.path)
        secret = by_id.get(found.group(1)) if found else None
        if request.url.path == "/v1/workers/register":
            try:
                secret = by_name.get(json.loads(request.content or b"{}").get("name"))
            except (ValueError, AttributeError):
                secret = None
        if secret:
            request.headers["X-Worker-Secret"] = secret

    def keep(response: httpx.Response) -> None:
        if response.request.url.path != "/v1/workers/register" or response.status_code != 200:
            return
        response.read()
        body = response.json()
        if body.get("worker_secret"):
            by_id[str(body["worker_id"])] = body["worker_secret"]
            name = json.loads(response.request.content).get("name")
            by_name[name] = body["worker_secret"]

    http.event_hooks = {"request": [attach], "response": [keep]}
    return http


@pytest.fixture
def secret_keeper() -> Callable[[TestClient], TestClient]:
    """Makes a test client act like the worker hosts that keep their secrets: the secret a
    registration returns is sent as ``X-Worker-Secret`` on later calls under that worker id
    (and on a re-registration of the name), unless a request sets the header itself. Every
    client of one test shares what was kept (a restarted API, threads)."""
    by_id: dict[str, str] = {}
    by_name: dict[str, str] = {}
    return lambda http: _keeps_worker_secrets(http, by_id, by_name)


@pytest.fixture
def client(app: FastAPI, secret_keeper: Callable[[TestClient], TestClient]
           ) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield secret_keeper(test_client)


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """The registries as they were: a plug-in kind registered in a test (its search side in
    ``search.kinds``, its kernels in ``kernel_templates.registry``) must not leak into other
    tests, which see the built-in kinds only."""
    from kernel_templates import registry
    from search import kinds, types

    registry.kinds()
    tables = [registry.KINDS, registry.FACTORIES, registry._SUPPORTS, registry._STATIC,
              registry._AVAILABLE, registry._CATALOGUE, registry._PREPARE, kinds._KINDS,
              types.PARSERS]
    saved = [dict(t) for t in tables]
    warm = set(registry._WARM_UP)
    modules = set(sys.modules)
    yield
    for table, before in zip(tables, saved, strict=True):
        table.clear()
        table.update(before)  # type: ignore[attr-defined]
    registry._WARM_UP.clear()
    registry._WARM_UP.update(warm)
    for name in set(sys.modules) - modules:
        if name.startswith("tests."):
            del sys.modules[name]  # imported again, a plug-in registers again
