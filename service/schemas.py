"""HTTP request and response models (pydantic lives at the edges only).

Every input is bounded: integers have ranges, floats must be finite, strings have lengths and no
NUL characters (Postgres rejects them), so nothing a client sends reaches the database in a
shape it cannot store.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from typing import Annotated, Any, Literal, get_type_hints

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    create_model,
    model_validator,
)

from search import kinds
from search.decision.policy import LOWER_PRECISIONS, Allowance, Policy, bounds_of
from search.types import Status

MAX_DIM = 2**31 - 1
MAX_ID = 2**63 - 1
MAX_SECONDS = 30 * 24 * 3600.0



def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _clean_json(value: Any) -> Any:
    """Worker-supplied JSON made storable: non-finite numbers become null, NULs are dropped."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {str(k).replace("\x00", ""): _clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_json(v) for v in value]
    return value


def _finite_or_none(value: Any) -> Any:
    """A timing or error that came out as NaN/inf (a broken kernel) is stored as unknown."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _truncate(value: str | None) -> str | None:
    return value.replace("\x00", "")[:20_000] if value is not None else None


Text = Annotated[str, AfterValidator(_no_nul)]
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)]
Dim = Annotated[int, Field(strict=True, le=MAX_DIM)]
Id = Annotated[int, Field(strict=True, ge=1, le=MAX_ID)]
#: A measured quantity: non-negative; NaN or infinity (a broken kernel) arrives as null.
Measure = Annotated[Annotated[float, Field(ge=0, strict=True)] | None,
                    BeforeValidator(_finite_or_none)]
Duration = Annotated[Annotated[float, Field(gt=0, strict=True)] | None,
                     BeforeValidator(_finite_or_none)]


def _known_backend(value: str) -> str:
    known = sorted({b for kind in kinds.kinds().values() for b in kind.backends})
    if value not in known:
        raise ValueError(f"unknown backend {value!r}; one of {', '.join(known)}")
    return value


#: A backend of some registered problem kind (``search.kinds``).
Backend = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_known_backend)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- jobs ---------------------------------------------------------------------------------------
#: A problem as a client sends it: ``kind`` (default ``gemm``) and that kind's fields, e.g.
#: ``{"kind": "gemm", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}``. The kind validates
#: the fields (``search.kinds``): a 422 names the field and the rule it breaks.
ProblemIn = Annotated[
    dict[Annotated[str, Field(max_length=64)], Any],
    Field(max_length=32, description="the problem: `kind` (default gemm) and that kind's fields",
          examples=[{"kind": "gemm", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}])]


class BudgetIn(_In):
    max_trials: Annotated[int, Field(strict=True, ge=1, le=10_000)] | None = None
    max_seconds: Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False,
                                        strict=True)] | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> BudgetIn:
        if self.max_trials is None and self.max_seconds is None:
            raise ValueError("budget needs max_trials and/or max_seconds")
        return self


def _policy_field(f: dataclasses.Field[Any], hint: Any) -> tuple[Any, Any]:
    """One ``PolicyIn`` field from a ``Policy`` (or ``Allowance``) field: its type (ints strict,
    floats finite), its bounds and description from the field's metadata, its default."""
    b = bounds_of(f)
    rng = {"ge": b.ge, "gt": b.gt, "le": b.le, "lt": b.lt}
    if hint is bool:
        tp: Any = Annotated[bool, Field(strict=True)]
    elif hint is int:
        tp = Annotated[int, Field(strict=True, **rng)]
    elif hint is float:
        tp = Annotated[float, Field(allow_inf_nan=False, strict=True, **rng)]
    elif f.name == "allow":
        tp = dict[Precision, AllowanceIn]
        return tp, Field(default_factory=dict, description=b.doc)
    else:
        raise TypeError(f"policy.{f.name}: no schema for {hint!r}")
    default = ... if f.default is dataclasses.MISSING else f.default
    return tp, Field(default, description=b.doc)


def _lower_precision(value: str) -> str:
    if value not in LOWER_PRECISIONS:
        raise ValueError(f"unknown precision {value!r}; one of {', '.join(LOWER_PRECISIONS)}")
    return value


#: A computation precision a policy may allow (``search.decision.policy.LOWER_PRECISIONS``).
Precision = Annotated[str, Field(max_length=32), AfterValidator(_lower_precision)]

#: One allowed precision's bound, derived from ``search.decision.policy.Allowance``.
AllowanceIn = create_model(  # type: ignore[call-overload]
    "AllowanceIn", __base__=_In, __module__=__name__,
    __doc__="What a policy allows of one lower precision (``search.decision.Allowance``).",
    **{f.name: _policy_field(f, hint) for f, hint in zip(
        dataclasses.fields(Allowance), get_type_hints(Allowance).values(), strict=True)})


#: How the decision loop spends GPU time, as a client sends it: derived from
#: ``search.decision.Policy`` (names, types, defaults, ranges, descriptions), all optional.
PolicyIn = create_model(  # type: ignore[call-overload]
    "PolicyIn", __base__=_In, __module__=__name__,
    __doc__="How the decision loop spends GPU time (``search.decision.Policy``); all optional.",
    **{f.name: _policy_field(f, hint) for f, hint in zip(
        dataclasses.fields(Policy), get_type_hints(Policy).values(), strict=True)})


class ReopenIn(_In):
    """How to run a job: budget, policy, backends, target GPU, seed. On its own it re-opens a
    problem's decision (a new job: new budget, policy, or after new versions)."""

    budget: BudgetIn | None = None
    policy: PolicyIn | None = None
    backends: list[Backend] | None = Field(
        None, min_length=1, max_length=16,
        description="the backends the job may use (default: every backend of the problem's kind)")
    gpu: Name | None = None
    seed: Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)] | None = None


class JobIn(ReopenIn):
    problem: ProblemIn


class LibraryOut(BaseModel):
    backend: str
    config: dict[str, Any]
    median_us: float
    p20_us: float | None
    p80_us: float | None
    tflops: float
    candidate_id: int | None
    precision: str | None = Field(None, description="the precision the kernel computes in: the "
                                                    "problem's input dtype unless a policy "
                                                    "allowed a lower one (fp8_e4m3, tf32)")
    rel_error: float | None = Field(None, description="its measured relative error against "
                                                      "the float64 product of its inputs")


class MeasurementOut(LibraryOut):
    measurement_id: int
    measured_at: datetime


class ProgressOut(BaseModel):
    trials_done: int
    trials_budget: int | None
    elapsed_s: float | None
    outstanding: int


class BudgetOut(BaseModel):
    max_trials: int | None
    max_seconds: float | None


class JobOut(BaseModel):
    id: int
    status: str
    problem_id: int
    problem_key: str
    problem: dict[str, Any]
    budget: BudgetOut
    backends: list[str]
    target_gpu: str | None
    gpu: str | None = Field(description="the GPU model the job is bound to (first lease)")
    seed: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    progress: ProgressOut
    best: MeasurementOut | None = Field(description="the decision's pick once decided (as "
                                               "GET /v1/best), else the fastest measured")
    library_best: MeasurementOut | None
    custom_best: MeasurementOut | None = Field(description="the fastest custom kernel measured")
    speedup: float | None = Field(description="library_best median / best median")
    error: str | None
    policy: dict[str, Any] = {}
    stage: str | None = Field(None, description="where the decision loop stands: library, "
                                                "cutlass (its search), custom, verify, "
                                                "recheck (the decision waits for held "
                                                "results' re-measurement), decided")
    decision: DecisionOut | None = None
    waiting: str | None = Field(None, description="why a queued job has not started: no "
                                                  "worker of its GPU model registered, or "
                                                  "none seen within a lease; or why a "
                                                  "running one in stage recheck has not "
                                                  "decided")
    held: list[HeldOut] = Field([], description="results held as faster than the roofline "
                                                "allows, each with why and what its "
                                                "re-measurement said")
    owner: str | None = Field(None, description="the name of the user token that submitted "
                                                "it (null: submitted while the service was "
                                                "open)")


class HeldOut(BaseModel):
    """A result held for re-measurement (``service.plausibility``)."""

    candidate_id: int | None
    backend: str | None
    median_us: float | None
    worker_id: int | None
    reason: str | None = Field(description="why it is held, why it stays refused, or why it "
                                           "was never confirmed (unconfirmed: the job ended "
                                           "before another worker re-measured it)")


class DecisionOut(BaseModel):
    """A verdict of the decision loop with its evidence (``search.decision.Decision``)."""

    id: int
    problem_id: int
    job_id: int | None
    gpu: str
    verdict: str = Field(description="library_sufficient | custom_wins | "
                                     "library_wins_after_search")
    chosen: str = Field(description="library or custom")
    backend: str | None
    config: dict[str, Any] | None
    median_us: float | None
    speedup: float | None = Field(description="library time / chosen time")
    baseline: str | None = Field(
        None, description="the library backend speed-ups are also stated against (the kind's "
                          "baseline: cublas for gemm)")
    speedup_vs_cublas: float | None = Field(
        None, description="the baseline's time / chosen time (the library pick may be another "
                          "library kernel, e.g. CUTLASS against cuBLAS); named before kinds")
    precision: str | None = Field(None, description="the precision the served kernel "
                                                    "computes in (the input dtype unless the "
                                                    "policy allowed a lower one)")
    rel_error: float | None = Field(None, description="the served kernel's measured relative "
                                                      "error (a lowered kernel's is the larger "
                                                      "of its trial's and its re-check's)")
    bound: str | None
    attainable_us: float | None
    efficiency_library: float | None
    efficiency_custom: float | None
    verified: bool = Field(description="decided on an interleaved re-measurement")
    rationale: str
    library: dict[str, Any] | None
    custom: dict[str, Any] | None
    spend: dict[str, Any] = Field(description="trials and GPU-seconds per stage (library "
                                              "and cutlass: compile-seconds too)")
    tiers: list[dict[str, Any]]
    library_trials: list[dict[str, Any]] = Field(
        [], description="every library candidate measured (cuBLAS, CUTLASS ops): backend, "
                        "config, status, median_us")
    notes: list[str] = Field([], description="why an allowed library backend was skipped")
    roofline: dict[str, Any] | None = Field(
        None, description="flops, bytes, compute/memory/attainable us, the peak and bandwidth "
                          "used, and the calibration's lowest pass of that peak")
    reference: dict[str, Any] | None = Field(
        None, description="cuBLAS in the verification's rounds, when the library's pick was "
                          "another library kernel: speedup_vs_cublas is its median over the "
                          "chosen kernel's")
    verification: dict[str, Any] | None = Field(
        None, description="the interleaved re-measurement behind the verdict (or the "
                          "library's confirmation): status, rounds, and each contender's "
                          "per-round medians (library_us, custom_us, reference_us)")
    policy: dict[str, Any]
    env: dict[str, Any]
    created_at: datetime
    superseded_at: datetime | None
    current: bool


class Page(BaseModel):
    total: int
    limit: int
    offset: int


class DecisionList(Page):
    items: list[DecisionOut]


class CalibrationOut(BaseModel):
    id: int
    gpu: str
    bandwidth_gbs: float
    peak_tflops: dict[str, float]
    #: by precision, the lowest calibration pass behind the peak (empty: one pass)
    peak_low_tflops: dict[str, float] = {}
    env: dict[str, Any]
    stale: bool
    job_id: int | None
    created_at: datetime
    bench_s: float | None = None
    #: the calibration task's measurement, and what it measured besides the peaks: each
    #: shape's passes, the sustained and burst rates (``workers.tasks.calibrate``)
    measurement_id: int | None = None
    extra: dict[str, Any] = {}


class CalibrationList(BaseModel):
    items: list[CalibrationOut]


class RefreshIn(_In):
    gpu: Name


class RefreshOut(BaseModel):
    gpu: str
    marked_stale: int


class JobList(Page):
    items: list[JobOut]


# -- best, problems, trials ---------------------------------------------------------------------
class BestOut(LibraryOut):
    gpu: str
    measured_at: datetime
    problem_key: str
    problem_id: int
    candidate_id: int | None
    library: LibraryOut | None
    speedup: float | None
    decision: DecisionOut | None = None


class ProblemOut(BaseModel):
    id: int
    key: str
    kind: str
    problem: dict[str, Any]
    created_at: datetime
    measurements: int


class ProblemList(Page):
    items: list[ProblemOut]


class TrialOut(BaseModel):
    id: int
    candidate_id: int | None
    job_id: int | None
    trial_number: int | None
    backend: str
    config: dict[str, Any]
    status: str
    median_us: float | None
    p20_us: float | None
    p80_us: float | None
    tflops: float | None
    reps: int
    rel_error: float | None
    precision: str | None = Field(None, description="what the kernel computes in (the input "
                                                    "dtype unless a policy allowed a lower one)")
    compile_s: float | None
    bench_s: float | None
    error: str | None
    gpu: str
    worker_id: int | None
    created_at: datetime
    env: dict[str, Any] = {}  # GPU name, SM count, clock, driver, CUDA/torch/triton versions
    #: what the measurement carried besides its timings (tasks are not trials: a
    #: verification's rounds are on the decision, a calibration's on /v1/calibrations)
    extra: dict[str, Any] = {}


class TrialList(Page):
    items: list[TrialOut]


# -- workers ------------------------------------------------------------------------------------
class DeviceIn(BaseModel):
    """``search.types.Device`` on the wire; unknown fields are ignored (newer workers)."""

    model_config = ConfigDict(extra="ignore")

    gpu_model: Name
    mode: Literal["cuda", "interpreter"]
    sm_count: Annotated[int, Field(strict=True, ge=0, le=1_000_000)] = 0
    cc: Annotated[Text, Field(max_length=32)] = ""
    smem_per_block: Annotated[int, Field(strict=True, ge=0, le=2**40)] = 0
    memory_bytes: Annotated[int, Field(strict=True, ge=0, le=2**60)] = 0
    driver: Annotated[Text, Field(max_length=100)] = ""
    cuda: Annotated[Text, Field(max_length=100)] = ""
    torch: Annotated[Text, Field(max_length=100)] = ""
    triton: Annotated[Text, Field(max_length=100)] = ""
    backends: list[Backend] = Field(min_length=1, max_length=32,
                                    description="the backends this worker runs (its kinds' "
                                                "registry says which)")


#: ``"<problem kind>/<backend>"``: the key a worker declares a backend's catalogue under (it is
#: stored under it, in a column of 32 characters).
CatalogueKey = Annotated[str, Field(pattern=r"^[a-z0-9_]{1,15}/[a-z0-9_]{1,16}$")]


def _catalogues(value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The declared catalogues, each checked by its problem kind (``ProblemKind.
    check_catalogue``: a ``ValueError`` naming its key and what is malformed is a 422)."""
    out = {}
    for key, body in value.items():
        kind, _, backend = key.partition("/")
        try:
            out[key] = kinds.get(kind).check_catalogue(backend, body)
        except ValueError as exc:  # ProblemError (an unknown kind) is one too
            raise ValueError(f"{key}: {exc}") from None
    return out


class RegisterIn(_In):
    """A worker's registration and what it declares of its backends, by ``"<kind>/<backend>"``
    (e.g. ``"gemm/cutlass"``: the CUTLASS operations it can build, which the service searches
    over)."""

    name: Name
    device: DeviceIn
    catalogues: Annotated[dict[CatalogueKey, dict[str, Any]], Field(max_length=16),
                          AfterValidator(_catalogues)] = Field(default_factory=dict)


class RegisterOut(BaseModel):
    worker_id: int
    gpu_model: str
    worker_secret: str | None = Field(
        None, description="issued by a name's first registration only (kept as a digest): "
                          "send it as X-Worker-Secret on every later call under worker_id")


class LeaseIn(_In):
    max_candidates: Annotated[int, Field(strict=True, ge=1, le=64)] = 8


class LeaseOut(BaseModel):
    lease_id: str | None
    expires_at: datetime | None
    lease_seconds: float
    candidates: list[dict[str, Any]]


class RenewOut(BaseModel):
    lease_id: str
    expires_at: datetime


class MeasurementIn(BaseModel):
    """``search.types.Measurement`` on the wire."""

    model_config = ConfigDict(extra="ignore")

    status: Status
    median_us: Duration = None
    p20_us: Measure = None
    p80_us: Measure = None
    reps: Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)] = 0
    rel_error: Measure = None
    compile_s: Measure = None
    bench_s: Measure = None
    error: Annotated[str | None, AfterValidator(_truncate)] = None
    env: Annotated[dict[str, Any], AfterValidator(_clean_json)] = Field(default_factory=dict)
    #: what a calibration (peaks) or a verification (per-round medians) measured
    extra: Annotated[dict[str, Any], AfterValidator(_clean_json)] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ok_has_time(self) -> MeasurementIn:
        if self.status == Status.OK and self.median_us is None:
            raise ValueError("a measurement with status ok needs median_us")
        if self.status == Status.HELD:
            raise ValueError("status held is the service's own: report what the run gave")
        return self


class ResultIn(_In):
    candidate_id: Id
    measurement: MeasurementIn


class ReportIn(_In):
    lease_id: Annotated[Text, Field(min_length=1, max_length=64)]
    results: list[ResultIn] = Field(max_length=256)


class RejectedOut(BaseModel):
    candidate_id: int
    reason: str


class ReportOut(BaseModel):
    accepted: list[int]
    rejected: list[RejectedOut]


JobOut.model_rebuild()
