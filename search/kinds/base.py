"""What a problem kind provides: the contract the service and the decision loop rely on."""

from __future__ import annotations

import dataclasses
import functools
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from search.decision.evidence import Roles
from search.types import INTERPRETER_GPU, Problem, ProblemError

if TYPE_CHECKING:
    from search.decision import Policy
    from search.decision.evidence import TierPlan
    from search.limits import DeviceLimits

__all__ = ["Catalogues", "Declared", "LibraryPlan", "ProblemKind", "parse_query"]


#: The longest text a problem field may hold.
MAX_TEXT = 64


@dataclass(frozen=True)
class Declared:
    """A catalogue a GPU model's workers declared when they registered (e.g. the CUTLASS
    operations they can build): its digest and its JSON body."""

    digest: str
    body: dict[str, Any] = dataclasses.field(hash=False)


#: ``name -> the catalogue declared under it for the job's GPU model`` (``None``: none was)
Catalogues = Callable[[str], Declared | None]


@dataclass(frozen=True)
class LibraryPlan:
    """What the library stage measures: ``(backend, config)`` pairs in rank order, and notes
    for the rationale on what was left out and why."""

    configs: tuple[tuple[str, dict[str, Any]], ...] = ()
    notes: tuple[str, ...] = ()


class ProblemKind(ABC):
    """A family of problems and how the search side treats it; one instance per kind,
    registered with ``search.kinds.register``. Its kernels register with
    ``kernel_templates.registry`` under the same name."""

    #: the ``kind`` field of its problems, and the first part of their keys
    name: ClassVar[str]
    #: the problem's dataclass: its init fields are the spec (JSON, or a query string)
    problem_type: ClassVar[type]
    #: backends whose kernels someone else maintains: the library side of a verdict
    library_backends: ClassVar[tuple[str, ...]]
    #: backends whose kernels the service generates and searches: the custom side
    custom_backends: ClassVar[tuple[str, ...]]
    #: the library kernel every speed-up is also stated against (cuBLAS for GEMM)
    baseline_backend: ClassVar[str]
    #: a search tier on the library side (its trials count as library), if the kind has one
    library_tier: ClassVar[str | None] = None

    #: how the rationale writes the baseline and the searched library backend
    baseline_name: ClassVar[str] = ""
    searched_name: ClassVar[str] = ""
    #: the two integer fields a shapes map plots against each other (the dashboard's); None:
    #: the problem type's first two integer fields
    map_axes: ClassVar[tuple[str, str] | None] = None

    @property
    def backends(self) -> tuple[str, ...]:
        return (*self.library_backends, *self.custom_backends)

    #: how a backend is named on the CPU (the interpreter device) where its own name would
    #: mislead: GEMM's ``cublas`` runs torch's CPU matmul there
    cpu_labels: ClassVar[Mapping[str, str]] = {}

    @property
    def roles(self) -> Roles:
        """The parts the kind's backends play in a decision."""
        tier = self.library_tier
        return Roles(self.baseline_backend, tier, self.backend_of(tier) if tier else None,
                     self.baseline_name, self.searched_name)

    def labels_on(self, gpu_model: str) -> Mapping[str, str]:
        """The backends named otherwise than by their id on ``gpu_model`` (text only: the id
        stays what jobs, measurements and ``--backends`` use)."""
        return self.cpu_labels if gpu_model == INTERPRETER_GPU else {}

    def label(self, backend: str, gpu_model: str) -> str:
        """How ``backend`` is named on ``gpu_model``."""
        return self.labels_on(gpu_model).get(backend, backend)

    def roles_on(self, gpu_model: str) -> Roles:
        """:attr:`roles` with the labels of ``gpu_model`` (a decision's rationale uses them)."""
        return dataclasses.replace(self.roles, labels=dict(self.labels_on(gpu_model)))

    # -- the spec -------------------------------------------------------------------------------
    def shape_label(self, problem: Problem) -> str:
        """The problem's shape as people write it (GEMM ``64x48x80``): its ``describe()``
        without the trailing dtype, which the dashboard shows in a column of its own."""
        text = problem.describe()
        suffix = f" {problem.dtype}"
        return text[:-len(suffix)] if text.endswith(suffix) and text != suffix else text

    def axes(self) -> tuple[str, str] | None:
        """The shapes map's axes (:attr:`map_axes`, else the first two integer fields of the
        problem type); None when it has fewer than two."""
        if self.map_axes is not None:
            return self.map_axes
        hints = typing.get_type_hints(self.problem_type)
        ints = [f.name for f in dataclasses.fields(self.problem_type)
                if f.init and hints.get(f.name) is int]
        return (ints[0], ints[1]) if len(ints) >= 2 else None

    def parse(self, data: Mapping[str, Any]) -> Problem:
        """The problem ``data`` describes; ``ProblemError`` names the field that breaks a rule
        (an unknown or missing field too). Served-only rules are :meth:`check_served`'s."""
        fields = {f.name: f for f in dataclasses.fields(self.problem_type) if f.init}
        unknown = sorted(set(data) - set(fields) - {"kind"})
        if unknown:
            raise ProblemError(unknown[0], f"not a field of a {self.name} problem; fields: "
                                           f"{', '.join(sorted(fields))}")
        for name, value in data.items():
            if isinstance(value, str) and len(value) > MAX_TEXT:
                raise ProblemError(name, f"at most {MAX_TEXT} characters")
            if isinstance(value, dict | list):
                raise ProblemError(name, "must be a number, a string or a boolean")
        missing = [n for n, f in fields.items() if data.get(n) is None
                   and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ProblemError(missing[0], "field required")
        return typing.cast(Problem, self.problem_type(
            **{k: v for k, v in data.items() if k != "kind" and v is not None}))

    @abstractmethod
    def from_key(self, key: str) -> Problem:
        """The problem whose :meth:`Problem.key` is ``key``."""

    def check_served(self, problem: Problem, backends: Sequence[str]) -> None:
        """Raise ``ProblemError`` unless the job's ``backends`` can serve ``problem`` (the
        default: any valid problem, with at least one of the kind's backends)."""
        if not set(backends) & set(self.backends):
            raise ProblemError("backends", f"a {self.name} problem runs on "
                                           f"{', '.join(self.backends)}")

    def check_policy(self, problem: Problem, policy: Policy, backends: Sequence[str]) -> None:
        """Raise ``ProblemError`` (field ``policy.allow.<precision>``) when the policy allows a
        lower precision that no backend of ``backends`` computes ``problem`` in."""
        for precision in policy.allow:
            why = self.lowering_refusal(problem, precision, backends)
            if why is not None:
                raise ProblemError(f"policy.allow.{precision}", why)

    def lowering_refusal(self, problem: Problem, precision: str, backends: Sequence[str]
                         ) -> str | None:
        """Why no backend of ``backends`` computes ``problem`` in ``precision`` (one of
        ``search.decision.policy.LOWER_PRECISIONS``); ``None`` when one does. The default:
        none computes below the input precision."""
        return f"no {self.name} backend computes in a precision below the input's"

    def precision_of(self, problem: Problem, backend: str, config: Mapping[str, Any]
                     ) -> str | None:
        """The precision a kernel (``backend`` with ``config``) computes ``problem`` in when
        it is below the input precision (``None``: the input precision). A lowered kernel's
        error is judged against the policy's bound (``Policy.judge``), and
        ``GET /v1/best?exact=true`` leaves it out."""
        return None

    def check_catalogue(self, backend: str, body: dict[str, Any]) -> dict[str, Any]:
        """A catalogue a worker declares for ``backend`` as it is stored; ``ValueError`` when
        it is malformed (the default stores what was declared)."""
        return body

    # -- what the decision loop measures ----------------------------------------------------------
    @abstractmethod
    def library_plan(self, problem: Problem, policy: Policy, backends: Sequence[str],
                     gpu_model: str, catalogues: Catalogues, seeds: int) -> LibraryPlan:
        """The library stage's candidates for a job allowed ``backends`` on ``gpu_model``;
        ``seeds``: how many ranked configurations of a searched library backend to measure
        (``KS_CUTLASS_CANDIDATES`` for GEMM)."""

    @abstractmethod
    def tier_plans(self, problem: Problem, device: Mapping[str, Any], policy: Policy
                   ) -> tuple[TierPlan, ...]:
        """The custom tiers in search order, each saying whether it applies here and why."""

    @abstractmethod
    def backend_of(self, tier: str) -> str:
        """The backend whose candidates a search ``tier`` creates."""

    @abstractmethod
    def tuner(self, storage_url: str, problem: Problem, gpu_model: str, limits: DeviceLimits,
              seed: int, tier: str | None, catalogues: Catalogues) -> Any:
        """The Optuna-backed tuner of ``tier`` (``service.tuning.Tuner``)."""


_COERCE: dict[str, Callable[[str], Any]] = {
    "int": int, "float": float, "str": str,
    "bool": lambda s: {"true": True, "1": True, "false": False, "0": False}[s.lower()],
}
_WHAT = {"bool": "true or false", "int": "an integer", "float": "a number"}


@functools.lru_cache(maxsize=64)
def _hints(problem_type: type) -> dict[str, Any]:
    """The field types of a problem dataclass (resolved once: it is on every ``/v1/best``)."""
    return typing.get_type_hints(problem_type)


def parse_query(kind: ProblemKind, params: Mapping[str, str]) -> Problem:
    """A problem from query-string values (``/v1/best?kind=gemm&m=...``): each value is read
    as its field's type, then parsed as a JSON spec would be."""
    hints = _hints(kind.problem_type)
    data: dict[str, Any] = {}
    for name, raw in params.items():
        if name == "kind":
            continue
        hint = str(hints.get(name, "str"))
        base = next((t for t in ("bool", "int", "float") if t in hint), "str")
        try:
            data[name] = _COERCE[base](raw)
        except (KeyError, ValueError):
            raise ProblemError(name, f"must be {_WHAT[base]}, got {raw!r}") from None
    return kind.parse(data)
