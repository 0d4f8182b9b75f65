"""Optuna ask/tell over a search space, one persisted study per (problem, GPU model, tier).

The study lives in Optuna's RDB storage in the service's own database, so it survives a restart
of the service and every job for the same shape and GPU model continues the same study. The
service calls :meth:`SpaceTuner.propose` when it needs candidates and :meth:`GemmTuner.record`
when a measurement comes back; nothing here touches a GPU.

Failed and infeasible configurations are told to Optuna as *infeasible* trials (a constraint
value > 0 with a penalty objective) rather than as failed trials, so the sampler learns to
avoid those regions instead of proposing them again.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import optuna
import sqlalchemy
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState
from sqlalchemy.engine import make_url

from search.types import Measurement, config_key

__all__ = ["PENALTY_US", "Choice", "CompileBudget", "Proposal", "SpaceTuner", "StudyTuner",
           "close_storages", "open_study", "storage_for"]

#: Objective given to infeasible or failed configurations; the constraint keeps them ranked
#: below every feasible one whatever this value is.
PENALTY_US = 1e9
#: Optuna's key for a named constraint (``Trial.set_constraint``); > 0 means infeasible.
_VIOLATION = "constraints:violation"

optuna.logging.set_verbosity(optuna.logging.WARNING)
_storages: dict[str, optuna.storages.RDBStorage] = {}
_storages_lock = threading.Lock()


@dataclass(frozen=True)
class Choice:
    """One dimension of a space: a name and the values it may take (ordered, small first)."""

    name: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class CompileBudget:
    """What compiling may still cost a search whose configurations name a unit to build
    (``config["op"]``: a CUTLASS operation, say).

    ``left_s``: compile-seconds the search may still spend (its budget minus what its measured
    compiles took). ``built``: operations with an artifact (measured before on this GPU model):
    free. ``pending``: unbuilt operations already proposed whose compile has not been reported;
    each is charged the estimate until its measurement arrives.
    """

    left_s: float = math.inf
    built: frozenset[str] = frozenset()
    pending: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Proposal:
    """A configuration to measure, and the Optuna trial its result must be told to."""

    trial_number: int
    config: dict[str, Any]


def storage_for(url: str) -> optuna.storages.RDBStorage:
    """One RDB storage per database URL and process (creating one checks the schema)."""
    with _storages_lock:
        if url not in _storages:
            # as db.engine: a lock waited on (SQLite) or a connection opened (Postgres) for a
            # bounded time, so an outage is an error the service answers, not a hang
            query = make_url(url).query
            kwargs: dict[str, Any] = {"pool_pre_ping": True}
            if url.startswith("sqlite"):
                kwargs = {"connect_args": {"timeout": float(query.get("timeout", 30))}}
            elif "connect_timeout" not in query:
                kwargs["connect_args"] = {"connect_timeout": 5}
            storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
            if url.startswith("sqlite"):
                _serialize_sqlite(storage.engine)
            _storages[url] = storage
        return _storages[url]


def _serialize_sqlite(engine: sqlalchemy.Engine) -> None:
    """Every Optuna transaction on SQLite takes the write lock at its start (``BEGIN
    IMMEDIATE``), as the service's own do (``db.engine``). Optuna hands out an enqueued trial
    by reading it as waiting and then marking it running; on Postgres the read locks the row
    (``FOR UPDATE``), on SQLite only this makes the two steps one, so that two API processes
    on one SQLite file never hand out the same trial."""

    @sqlalchemy.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy's "begin" below opens them

    @sqlalchemy.event.listens_for(engine, "begin")
    def _on_begin(conn: sqlalchemy.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # the connections opened so far were not configured


def create_storage_tables(url: str) -> None:
    """Create Optuna's tables and version row in the database at ``url`` (if missing)."""
    storage = optuna.storages.RDBStorage(url)
    storage.remove_session()
    storage.engine.dispose()


def close_storages() -> None:
    """Dispose of the cached storages' connection pools (tests, shutdown)."""
    with _storages_lock:
        for storage in _storages.values():
            storage.remove_session()
            storage.engine.dispose()
        _storages.clear()


def open_study(storage: optuna.storages.RDBStorage, name: str) -> optuna.Study:
    """The study ``name`` in ``storage``, created (minimising) if there is none. It is read
    first: creating first, as ``create_study(load_if_exists=True)`` does, makes every tuner of
    an existing study try an insert that the database refuses (and logs as an error)."""
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:  # none yet; another process creating it at once is loaded instead
        return optuna.create_study(storage=storage, study_name=name, direction="minimize",
                                   load_if_exists=True)


class StudyTuner:
    """What the tuners here share: one persisted Optuna study, ask/tell bookkeeping, and the
    rule that a failed or infeasible configuration is told as an infeasible trial.

    Subclasses own the search space and :meth:`propose`; this base owns everything that happens
    once a proposal exists (``record``, ``abandon``, ``best``), so the Triton and CUTLASS
    tuners tell Optuna the same things in the same way.
    """

    def __init__(self, storage_url: str, name: str, seed: int = 0) -> None:
        self.exhausted = False
        self._study = open_study(storage_for(storage_url), name)
        n_trials = len(self._study.get_trials(deepcopy=False))
        #: a new study: the subclass enqueues its seeds
        self.fresh = n_trials == 0
        # A fresh sampler per call: reseed from the study's length, so that two calls do not
        # replay one random stream (the sampler itself keeps no state worth persisting).
        digest = hashlib.sha256(f"{seed}:{name}:{n_trials}".encode()).digest()
        self._study.sampler = optuna.samplers.TPESampler(
            seed=int.from_bytes(digest[:4], "little"), multivariate=True, constant_liar=True,
            n_startup_trials=10)

    @property
    def study(self) -> optuna.Study:
        return self._study

    def record(self, trial_number: int, measurement: Measurement) -> None:
        """Tell the study how a proposed configuration did (idempotent)."""
        if self._state(trial_number) != TrialState.RUNNING:
            return
        self._tell(trial_number, measurement, reused=False)

    def abandon(self, trial_number: int) -> None:
        """Forget a proposal that will never be measured (its job was cancelled or ran out of
        time): the configuration may be proposed again later."""
        if self._state(trial_number) == TrialState.RUNNING:
            self._study.tell(trial_number, state=TrialState.PRUNED)

    def stale_running(self, older_than_s: float) -> list[int]:
        """Trials asked more than ``older_than_s`` seconds ago and not told yet: in flight, or
        left behind by a service process that died between asking and storing or telling."""
        cutoff = datetime.now() - timedelta(seconds=older_than_s)  # Optuna's times are local
        return [t.number for t in self._study.get_trials(deepcopy=False,
                                                         states=(TrialState.RUNNING,))
                if t.datetime_start is not None and t.datetime_start < cutoff]

    def best(self) -> tuple[dict[str, Any], float] | None:
        feasible = [t for t in self._study.get_trials(deepcopy=False,
                                                      states=(TrialState.COMPLETE,))
                    if self._feasible(t)]
        if not feasible:
            return None
        top = min(feasible, key=lambda t: t.value)
        return self._config_of(top), float(top.value)

    @staticmethod
    def _feasible(trial: optuna.trial.FrozenTrial) -> bool:
        """Whether a trial holds a real measurement: complete, with a value, not infeasible."""
        return (trial.state == TrialState.COMPLETE and trial.value is not None
                and not trial.system_attrs.get(_VIOLATION))

    def _infeasible(self, trial: optuna.Trial, why: str) -> None:
        """Tell the study at once that a configuration breaks a rule (``why``)."""
        trial.set_constraint("violation", 1.0)
        trial.set_user_attr("invalid", why)
        self._study.tell(trial, PENALTY_US)

    def _config_of(self, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
        """The configuration a trial stands for (its parameters, unless a subclass maps
        them)."""
        return dict(trial.params)

    def _trial_id(self, trial_number: int) -> int:
        return self._study._storage.get_trial_id_from_study_id_trial_number(
            self._study._study_id, trial_number)

    def _state(self, trial_number: int) -> TrialState:
        # One trial's row, not the whole study: this runs on every report.
        return self._study._storage.get_trial(self._trial_id(trial_number)).state

    def _tell(self, trial_number: int, m: Measurement, *, reused: bool) -> None:
        storage = self._study._storage
        trial_id = self._trial_id(trial_number)
        storage.set_trial_user_attr(trial_id, "status", str(m.status))
        if m.compile_s is not None:
            storage.set_trial_user_attr(trial_id, "compile_s", float(m.compile_s))
        if reused:
            storage.set_trial_user_attr(trial_id, "reused", True)
        if m.ok:
            storage.set_trial_system_attr(trial_id, _VIOLATION, 0.0)
            self._study.tell(trial_number, float(m.median_us))
        else:
            storage.set_trial_system_attr(trial_id, _VIOLATION, 1.0)
            self._study.tell(trial_number, PENALTY_US)


def _compatible_name(storage_url: str, name: str,
                     dists: dict[str, CategoricalDistribution]) -> str:
    """``name``, unless a study of that name holds trials of another space: Optuna refuses to
    ask a categorical parameter whose choices changed (a release that widens a list of tile
    sizes, say), so that space gets its own study, ``name|space-<digest of the space>``. The
    choice is made from the study's first trial alone (one row), the same in every process; a
    parameter the old trials lack is no conflict (Optuna takes new parameters)."""
    storage = storage_for(storage_url)
    try:
        study_id = storage.get_study_id_from_name(name)
        first = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id, 0))
    except KeyError:
        return name
    if all(first.distributions.get(p, d) == d for p, d in dists.items()):
        return name
    spec = repr(sorted((p, tuple(d.choices)) for p, d in dists.items()))
    return f"{name}|space-{hashlib.sha256(spec.encode()).hexdigest()[:10]}"


class SpaceTuner(StudyTuner):
    """Proposes configurations of a space of categorical :class:`Choice` s for one problem on
    one GPU model: the study ``name`` starts with ``seeds``; ``complete`` fills a trial's
    parameters into the full configuration a kernel takes (defaults of keys not searched);
    ``violations`` lists the static rules a configuration breaks (empty: feasible)."""

    def __init__(self, storage_url: str, name: str, space: Sequence[Choice], *,
                 seeds: Sequence[dict[str, Any]] = (), seed: int = 0,
                 complete: Callable[[dict[str, Any]], dict[str, Any]] = dict,
                 violations: Callable[[dict[str, Any]], list[str]] = lambda c: []) -> None:
        self._space = tuple(space)
        self._params = tuple(c.name for c in self._space)
        self._dists = {c.name: CategoricalDistribution(list(c.values)) for c in self._space}
        self._complete = complete
        self._violations = violations
        super().__init__(storage_url, _compatible_name(storage_url, name, self._dists), seed)
        if self.fresh:
            for config in seeds:
                self._study.enqueue_trial({k: config[k] for k in self._params},
                                          skip_if_exists=True)

    def _config_of(self, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
        return self._complete(dict(trial.params))

    def propose(self, n: int, known: Callable[[dict[str, Any]], Measurement | None]
                ) -> list[Proposal]:
        """Up to ``n`` configurations never measured for this problem and GPU model.

        Infeasible configurations and ones ``known`` already has a measurement for are told to
        the study at once and not returned. Fewer than ``n`` come back only when many asks in a
        row found nothing new: then :attr:`exhausted` is set.
        """
        if n <= 0:
            return []
        in_flight = {config_key(self._complete(dict(t.params))) for t in
                     self._study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        out: list[Proposal] = []
        misses, max_misses = 0, 200
        while len(out) < n and misses < max_misses:
            trial = self._study.ask(self._dists)
            config = self._complete({name: trial.params[name] for name in self._params})
            key = config_key(config)
            reasons = self._violations(config)
            if reasons:
                self._infeasible(trial, "; ".join(reasons))
                misses += 1
                continue
            if key in in_flight:
                # Proposed again while its first trial still waits for a result.
                self._study.tell(trial, state=TrialState.PRUNED)
                misses += 1
                continue
            previous = known(config)
            if previous is not None:
                self._tell(trial.number, previous, reused=True)
                misses += 1
                continue
            in_flight.add(key)
            out.append(Proposal(trial.number, config))
            misses = 0
        self.exhausted = len(out) < n
        return out
