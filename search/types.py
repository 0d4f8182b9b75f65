"""The shared vocabulary: problems, candidates, measurements, devices.

Everything here is a frozen value with a ``to_dict``/``from_dict`` pair so it can cross the
HTTP boundary between the service and the workers as plain JSON. Nothing here imports torch or
triton: the service runs on machines without a GPU.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

#: The GPU model name a worker without a GPU reports; its results never mix with GPU results.
INTERPRETER_GPU = "cpu-interpreter"


class Status(StrEnum):
    """How one candidate's run ended. A bad configuration is data, not an exception."""

    OK = "ok"
    INVALID = "invalid"
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"
    WRONG_RESULT = "wrong_result"
    TIMEOUT = "timeout"
    OOM = "oom"
    CRASHED = "crashed"
    UNSUPPORTED = "unsupported"
    #: set by the service, never reported: faster than the roofline allows, kept out of every
    #: answer until another worker's re-measurement confirms it
    HELD = "held"


class Task(StrEnum):
    """Work that is not one kernel's measurement: leased and reported like a kernel candidate,
    but stored and sent with ``task`` set and no backend (``Candidate.task``)."""

    CALIBRATE = "calibrate"  # measure the device's bandwidth and peak throughput
    VERIFY = "verify"  # re-measure two kernels interleaved (A B A B ...)


class ProblemError(ValueError):
    """A problem that breaks a rule; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@runtime_checkable
class Problem(Protocol):
    """One problem of any kind: a frozen value whose ``kind`` names its kind
    (``search.kinds``), with what the roofline and the wire format need."""

    @property
    def kind(self) -> str: ...

    @property
    def dtype(self) -> str:
        """The input precision: which calibrated peak bounds it."""

    def key(self) -> str:
        """Canonical key, starting with ``<kind>:``; equal problems, equal keys."""

    def describe(self) -> str:
        """Short human text, e.g. ``4096x4096x4096 bf16``."""

    @property
    def flops(self) -> int: ...

    @property
    def min_bytes(self) -> int:
        """Bytes any kernel must move: each input read once, each output written once."""

    def tflops(self, median_us: float) -> float: ...

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON, ``kind`` included; :func:`parse_problem` reads it back."""


#: ``kind`` -> the function that parses that kind's spec (``search.kinds.register`` fills it).
PARSERS: dict[str, Callable[[Mapping[str, Any]], Problem]] = {}
#: The module that registers the built-in kinds, imported on the first parse.
BUILTIN_KINDS = "search.kinds"


def parse_problem(data: Mapping[str, Any]) -> Problem:
    """The problem that ``data`` (a problem's ``to_dict()``) describes, by its ``kind``
    (default ``gemm``), validated by that kind.

    The one place where a stored or sent problem becomes a value: the service, the database's
    records and the wire format all parse through here. Raises ``ProblemError`` naming the
    field that breaks a rule.
    """
    if not isinstance(data, Mapping):
        raise ProblemError("problem", "must be an object")
    if BUILTIN_KINDS not in sys.modules:
        importlib.import_module(BUILTIN_KINDS)
    kind = data.get("kind", "gemm")
    parser = PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise ProblemError("kind", f"unknown problem kind {kind!r}; one of {sorted(PARSERS)}")
    return parser(data)


def config_key(config: dict[str, Any]) -> str:
    """Canonical text of a configuration: equal configs, equal keys."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Candidate:
    """One thing a worker runs for a problem: a kernel (a ``backend`` and its configuration)
    or a task (``task``, a :class:`Task` value, with its settings in ``config``); exactly one
    of ``backend`` and ``task`` is set."""

    problem: Problem
    backend: str | None
    config: dict[str, Any] = field(default_factory=dict, hash=False)
    id: int | None = None
    task: str | None = None

    def __post_init__(self) -> None:
        if (self.backend is None) == (self.task is None):
            raise ValueError(f"a candidate names a backend or a task, not both or neither "
                             f"(backend={self.backend!r}, task={self.task!r})")

    @classmethod
    def of_task(cls, problem: Problem, task: str, config: dict[str, Any] | None = None,
                id: int | None = None) -> Candidate:
        return cls(problem, None, dict(config or {}), id, task)

    @property
    def config_key(self) -> str:
        return config_key(self.config)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "problem": self.problem.to_dict(), "backend": self.backend,
                "task": self.task, "config": dict(self.config)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(problem=parse_problem(data["problem"]), backend=data.get("backend"),
                   config=dict(data.get("config") or {}), id=data.get("id"),
                   task=data.get("task"))


@dataclass(frozen=True)
class Measurement:
    """The outcome of running one candidate: a status, and timings when it is ``ok``.

    Times are in microseconds (median and the 20th/80th percentiles over ``reps`` timed runs).
    ``max_rel_error`` is ‖out − ref‖ / ‖ref‖ against a high-precision reference.
    """

    status: Status
    median_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None
    reps: int = 0
    rel_error: float | None = None
    compile_s: float | None = None
    bench_s: float | None = None
    error: str | None = None
    env: dict[str, Any] = field(default_factory=dict, hash=False)
    #: what a task measured besides one median (a calibration's peaks, a verification's rounds)
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK and self.median_us is not None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = str(self.status)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        data = dict(data)
        data["status"] = Status(data["status"])
        data["extra"] = dict(data.get("extra") or {})
        return cls(**data)


@dataclass(frozen=True)
class Device:
    """What a worker reports about its accelerator; ``gpu_model`` groups comparable devices."""

    gpu_model: str
    mode: str  # "cuda" or "interpreter"
    sm_count: int = 0
    cc: str = ""
    smem_per_block: int = 0  # bytes a block may use (opt-in limit)
    memory_bytes: int = 0
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    triton: str = ""
    backends: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["backends"] = list(self.backends)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Device:
        data = dict(data)
        if "backends" in data:
            data["backends"] = tuple(data["backends"])
        return cls(**data)
