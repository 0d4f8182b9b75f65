"""The attention kind's search side: registration, tier plans, spaces, static rules, seeds, the
roofline, and the decision loop driven to each verdict by FAKE timings (no GPU runs here)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from search import kinds
from search.decision import (
    Calibrate,
    Decide,
    Decision,
    Evidence,
    MeasureLibrary,
    Policy,
    Search,
    Trial,
    Verdict,
    Verification,
    Verify,
    plan,
)
from search.kinds.attention import ATTENTION, LIBRARY, AttentionKind
from search.kinds.attention.constraints import smem_bytes, violations
from search.kinds.attention.space import DECODE, FLASH, params, seeds, space, tier_plans
from search.kinds.attention.spec import AttentionProblem
from search.kinds.attention.tuner import AttentionTuner, study_name
from search.kinds.base import parse_query
from search.limits import DeviceLimits, limits_for
from search.roofline import Calibration, roofline
from search.types import Measurement, ProblemError, Status

H100 = DeviceLimits()
CAL = Calibration("NVIDIA H100 80GB HBM3", 3000.0,
                  {"bf16": 800.0, "fp16": 800.0, "fp32": 50.0, "tf32": 400.0})
PREFILL = AttentionProblem(batch=8, heads=32, kv_heads=8, s_q=4096, s_kv=4096, d=128,
                           causal=True)
DECODE_SHAPE = AttentionProblem(batch=64, heads=32, kv_heads=8, s_q=1, s_kv=8192, d=128)
SHAPES = [PREFILL, DECODE_SHAPE,
          AttentionProblem(batch=4, heads=16, s_q=2048, s_kv=2048, d=64, dtype="fp16"),
          AttentionProblem(batch=2, heads=8, s_q=1024, s_kv=1024, d=256),
          AttentionProblem(batch=1, heads=2, kv_heads=1, s_q=32, s_kv=48, d=16, dtype="fp16",
                           causal=True)]


# -- the kind ----------------------------------------------------------------------------------
def test_attention_is_a_builtin_kind_with_its_roles() -> None:
    kind = kinds.get("attention")
    assert isinstance(kind, AttentionKind)
    assert kind.library_backends == ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "sdpa_math",
                                     "flex")
    assert kind.custom_backends == ("triton", "triton_decode")
    assert kind.roles.baseline == "sdpa_cudnn" and kind.roles.library_tier is None
    assert kind.backend_of(FLASH) == "triton" and kind.backend_of(DECODE) == "triton_decode"
    assert kinds.problem_from_key(PREFILL.key()) == PREFILL


def test_parse_query_reads_optional_ints_floats_and_bools() -> None:
    p = parse_query(ATTENTION, {"kind": "attention", "batch": "8", "heads": "32",
                                "kv_heads": "8", "s_q": "4096", "s_kv": "4096", "d": "128",
                                "causal": "true", "dtype": "bf16"})
    assert p == PREFILL
    q = parse_query(ATTENTION, {"batch": "1", "heads": "2", "s_q": "1", "s_kv": "8", "d": "64",
                                "scale": "0.5", "causal": "0"})
    assert q.scale == 0.5 and q.causal is False and q.kv_heads == 2
    with pytest.raises(ProblemError) as exc:
        parse_query(ATTENTION, {"batch": "1", "heads": "2", "s_q": "1", "s_kv": "8", "d": "64",
                                "kv_heads": "one"})
    assert exc.value.field == "kv_heads"


def test_library_plan_is_every_allowed_library_backend_in_rank_order() -> None:
    lp = ATTENTION.library_plan(PREFILL, Policy(), ["triton", "flex", "sdpa_math",
                                                    "sdpa_cudnn"], "gpu", lambda n: None, 6)
    assert [b for b, _ in lp.configs] == ["sdpa_cudnn", "sdpa_math", "flex"]
    full = ATTENTION.library_plan(PREFILL, Policy(), ATTENTION.backends, "gpu",
                                  lambda n: None, 6)
    assert [b for b, _ in full.configs] == list(LIBRARY)


def test_check_served_refuses_decode_alone_for_long_queries() -> None:
    ATTENTION.check_served(DECODE_SHAPE, ["triton_decode"])
    ATTENTION.check_served(PREFILL, ["triton"])
    with pytest.raises(ProblemError) as exc:
        ATTENTION.check_served(PREFILL, ["triton_decode"])
    assert exc.value.field == "backends" and "s_q=4096 > 16" in exc.value.message
    with pytest.raises(ProblemError):
        ATTENTION.check_served(PREFILL, ["cublas"])


def test_roofline_is_compute_bound_for_prefill_and_memory_bound_for_decode() -> None:
    pre = roofline(PREFILL, CAL)
    assert pre is not None and pre.bound == "compute"
    assert pre.compute_us == pytest.approx(PREFILL.flops / 800e12 * 1e6)
    dec = roofline(DECODE_SHAPE, CAL)
    assert dec is not None and dec.bound == "memory"
    assert dec.memory_us == pytest.approx(DECODE_SHAPE.min_bytes / 3000e9 * 1e6)
    fp32 = roofline(replace(PREFILL, dtype="fp32"), CAL)
    assert fp32 is not None and fp32.peak_tflops == 50.0  # full fp32, no tf32 unless allowed


# -- tiers, spaces, rules, seeds ---------------------------------------------------------------
def test_tier_plans_explain_when_decode_does_not_apply() -> None:
    long = {t.name: t for t in tier_plans(PREFILL)}
    assert long[FLASH].applicable and not long[DECODE].applicable
    assert "s_q=4096 > 16: the decode tier is for short queries" in long[DECODE].reason
    short = {t.name: t for t in tier_plans(DECODE_SHAPE)}
    assert short[FLASH].applicable and short[DECODE].applicable
    assert short[DECODE].weight > short[FLASH].weight
    packed = {t.name: t for t in tier_plans(AttentionProblem(batch=1, heads=64, kv_heads=1,
                                                             s_q=16, s_kv=1024, d=64))}
    assert not packed[DECODE].applicable and "1024 rows per program" in packed[DECODE].reason
    device = {"mode": "cuda", "cc": "9.0", "sm_count": 132}
    assert ATTENTION.tier_plans(PREFILL, device, Policy()) == tier_plans(PREFILL)


def test_spaces_are_bounded_by_the_sequences() -> None:
    flash = {c.name: c.values for c in space(PREFILL, FLASH)}
    assert flash == {"BLOCK_M": (16, 32, 64, 128), "BLOCK_N": (16, 32, 64, 128),
                     "num_warps": (2, 4, 8), "num_stages": (1, 2, 3, 4)}
    tiny = {c.name: c.values for c in space(SHAPES[-1], FLASH)}
    assert tiny["BLOCK_M"] == (16, 32) and tiny["BLOCK_N"] == (16, 32, 64)
    dec = {c.name: c.values for c in space(DECODE_SHAPE, DECODE)}
    assert dec["NUM_SPLITS"] == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert dec["BLOCK_N"] == (16, 32, 64, 128, 256) and dec["num_warps"] == (2, 4, 8)
    short_kv = AttentionProblem(batch=1, heads=4, s_q=1, s_kv=64, d=64)
    assert {c.name: c.values for c in space(short_kv, DECODE)}["NUM_SPLITS"] == (1, 2, 4)
    with pytest.raises(ValueError):
        space(PREFILL, "tiles")


def test_static_rules_reject_what_cannot_fit() -> None:
    big = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4}
    assert smem_bytes(PREFILL, big, FLASH) == (128 * 128 + 4 * 2 * 128 * 128) * 2
    assert any("shared memory" in v for v in violations(PREFILL, big, FLASH, H100))
    assert violations(PREFILL, {**big, "num_stages": 3}, FLASH, H100) == []
    assert not violations(PREFILL, big, FLASH, DeviceLimits.interpreter())
    spill = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 2, "num_stages": 2}
    assert any("registers per thread" in v for v in violations(PREFILL, spill, FLASH, H100))
    small = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 8, "num_stages": 2}
    assert any("too small for 8 warps" in v for v in violations(PREFILL, small, FLASH, H100))
    over_split = {"NUM_SPLITS": 256, "BLOCK_N": 64, "num_warps": 4}
    assert any("keys per split" in v for v in violations(DECODE_SHAPE, over_split, DECODE, H100))
    packed = AttentionProblem(batch=1, heads=64, kv_heads=1, s_q=16, s_kv=1024, d=64)
    assert any("pack 1024 rows" in v for v in violations(
        packed, {"NUM_SPLITS": 4, "BLOCK_N": 64, "num_warps": 4}, DECODE, H100))


@pytest.mark.parametrize("problem", SHAPES, ids=lambda p: p.describe())
@pytest.mark.parametrize("tier", [FLASH, DECODE])
def test_seeds_are_legal_and_feasible_on_an_h100(problem: AttentionProblem, tier: str) -> None:
    applies = {t.name: t.applicable for t in tier_plans(problem)}
    if not applies[tier]:
        return
    legal = {c.name: set(c.values) for c in space(problem, tier)}
    found = seeds(problem, tier)
    assert found, "a tier that applies starts from known-good configurations"
    for config in found:
        assert set(config) == set(params(tier))
        assert all(config[k] in legal[k] for k in config)
        assert violations(problem, config, tier, H100) == [], config
    if tier == FLASH and problem.d == 128 and problem.s_q >= 128:
        assert found[0] == {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3}
    if tier == DECODE:
        # the first seed's programs (splits x batch x kv_heads) just fill 132 SMs
        programs = problem.batch * problem.kv_heads * found[0]["NUM_SPLITS"]
        assert programs >= 132 or found[0]["NUM_SPLITS"] == max(c.values[-1] for c in space(
            problem, tier) if c.name == "NUM_SPLITS")
        assert found[0]["NUM_SPLITS"] == 1 or programs // 2 < 132


@pytest.mark.parametrize("problem", SHAPES, ids=lambda p: p.describe())
def test_hopper_options_are_searched_only_where_the_device_has_tma(problem: AttentionProblem
                                                                   ) -> None:
    hopper = limits_for("cuda", 232_448, "9.0")
    names = {c.name for c in space(problem, FLASH, hopper)}
    assert {"TMA", "PERSISTENT"} <= names and "WS" not in names
    assert not {"TMA", "PERSISTENT"} & {c.name for c in space(problem, FLASH, H100)}
    assert not {"TMA", "PERSISTENT"} & {c.name for c in space(
        problem, FLASH, limits_for("interpreter", 0))}
    found = seeds(problem, FLASH, hopper)
    for config in found:
        assert set(config) == set(params(FLASH, hopper))
        assert violations(problem, config, FLASH, hopper) == [], config
    tiles_fit = problem.s_q % 128 == 0 and problem.s_kv % 128 == 0
    if problem.d == 128 and tiles_fit:
        assert found[0] == {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3,
                            "TMA": 1, "PERSISTENT": 0}


def test_tuner_study_is_named_by_tier_problem_and_gpu(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    tuner = ATTENTION.tuner(url, DECODE_SHAPE, "gpu", H100, 0, DECODE, lambda n: None)
    assert isinstance(tuner, AttentionTuner)
    assert tuner.study.study_name == study_name(DECODE_SHAPE, "gpu", DECODE) == \
        f"attention|decode|{DECODE_SHAPE.key()}|gpu"
    proposals = tuner.propose(3, lambda c: None)
    assert [p.config for p in proposals] == seeds(DECODE_SHAPE, DECODE)[:3]
    tuner.record(proposals[0].trial_number, Measurement(Status.OK, median_us=700.0))
    assert tuner.best() == (proposals[0].config, 700.0)


# -- the decision loop with FAKE timings -------------------------------------------------------
Timing = Callable[[str, dict[str, Any]], float | None]


@dataclass
class FakeAttentionDevice:
    """Drives ``plan`` for an attention job to a decision, answering every measurement from
    ``timing`` (backend, config -> FAKE median in us; None: the backend is not on the worker,
    so its candidate fails as a worker without it would report). Verification rounds repeat
    each contender's time with a 0.5% jitter."""

    problem: AttentionProblem
    timing: Timing
    policy: Policy = field(default_factory=Policy)
    backends: tuple[str, ...] = ATTENTION.backends
    max_trials: int = 12
    trials: list[Trial] = field(default_factory=list)
    verification: Verification | None = None
    calibrated: bool = False

    def _add(self, backend: str, config: dict[str, Any], tier: str | None) -> None:
        us = self.timing(backend, config)
        tid = len(self.trials) + 1
        if us is None:
            self.trials.append(Trial(tid, backend, config, tier, "launch_error"))
        else:
            self.trials.append(Trial(tid, backend, config, tier, "ok", us, us * 0.99, us * 1.01,
                                     gpu_s=1.0))

    def run(self) -> Decision:
        kind = ATTENTION
        queues = {t: iter(seeds(self.problem, t) + [
            dict(zip(params(t), values, strict=True)) for values in itertools.product(
                *(c.values for c in space(self.problem, t)))]) for t in (FLASH, DECODE)}
        exhausted: set[str] = set()
        for _ in range(500):
            ev = Evidence(
                problem=self.problem, policy=self.policy,
                calibration=CAL if self.calibrated else None,
                library_configs=kind.library_plan(self.problem, self.policy, self.backends,
                                                  CAL.gpu_model, lambda n: None, 6).configs,
                custom_allowed=any(b in kind.custom_backends for b in self.backends),
                tiers=kind.tier_plans(self.problem, {}, self.policy), trials=tuple(self.trials),
                exhausted_tiers=frozenset(exhausted), verification=self.verification,
                max_trials=self.max_trials, roles=kind.roles)
            for a in plan(ev).actions:
                if isinstance(a, Decide):
                    return a.decision
                if isinstance(a, Calibrate):
                    self.calibrated = True
                elif isinstance(a, MeasureLibrary):
                    for backend, config in a.candidates:
                        self._add(backend, dict(config), None)
                elif isinstance(a, Search):
                    for _ in range(a.n if a.n is not None else 4):
                        config = next(queues[a.tier], None)
                        if config is None:
                            exhausted.add(a.tier)
                            break
                        self._add(kind.backend_of(a.tier), config, a.tier)
                elif isinstance(a, Verify):
                    self.verification = self._verify(a)
        raise AssertionError("no decision in 500 steps")

    def _verify(self, a: Verify) -> Verification:
        jitter = (1.0, 0.995, 1.005, 0.998, 1.002)

        def rounds(t: Trial | None) -> tuple[float, ...]:
            return tuple(float(t.median_us or 0) * j for j in jitter) if t else ()

        return Verification(a.library.id, a.custom.id if a.custom else None, "ok",
                            rounds(a.library), rounds(a.custom), 1.0, None,
                            a.reference.id if a.reference else None, rounds(a.reference))


def _sdpa(cudnn: float | None, **others: float | None) -> Timing:
    """FAKE library times (cuDNN and the other SDPA backends, Flex) and custom times."""
    table = {"sdpa_cudnn": cudnn, "sdpa_flash": others.get("flash", 1.7 * (cudnn or 1e3)),
             "sdpa_efficient": others.get("efficient", 3.3 * (cudnn or 1e3)),
             "sdpa_math": others.get("math", 20.0 * (cudnn or 1e3)),
             "flex": others.get("flex", 1.3 * (cudnn or 1e3))}

    def timing(backend: str, config: dict[str, Any]) -> float | None:
        if backend in table:
            return table[backend]
        base = others["triton"] if backend == "triton" else others.get("triton_decode", 1e9)
        # a config's FAKE time: the seeds' first is the best, later ones slower
        return float(base) * (1 + 0.01 * (config.get("num_stages", 1) != 3))
    return timing


def test_prefill_where_cudnn_is_near_the_roofline_is_library_sufficient() -> None:
    attainable = roofline(PREFILL, CAL).attainable_us  # type: ignore[union-attr]
    d = FakeAttentionDevice(PREFILL, _sdpa(attainable / 0.95, triton=attainable)).run()
    assert d.verdict == Verdict.LIBRARY_SUFFICIENT
    assert d.library is not None and d.library.backend == "sdpa_cudnn"
    assert d.spend["custom"]["trials"] == 0 and d.baseline == "sdpa_cudnn"
    assert d.speedup_vs_baseline == pytest.approx(1.0)


def test_a_faster_triton_kernel_wins_after_verification() -> None:
    attainable = roofline(PREFILL, CAL).attainable_us  # type: ignore[union-attr]
    d = FakeAttentionDevice(PREFILL, _sdpa(attainable / 0.6, triton=attainable / 0.8),
                            max_trials=10).run()
    assert d.verdict == Verdict.CUSTOM_WINS and d.verified
    assert d.custom is not None and d.custom.backend == "triton"
    assert d.library is not None and d.library.backend == "sdpa_cudnn"
    assert d.speedup_vs_baseline == pytest.approx(0.8 / 0.6, rel=0.02)
    assert [t["tier"] for t in d.tiers] == [FLASH, DECODE]
    assert "s_q=4096 > 16" in d.tiers[1]["reason"]


def test_decode_shape_searches_the_decode_tier_and_the_library_wins_a_tie() -> None:
    attainable = roofline(DECODE_SHAPE, CAL).attainable_us  # type: ignore[union-attr]
    cudnn = attainable / 0.7
    d = FakeAttentionDevice(DECODE_SHAPE, _sdpa(cudnn, triton=2 * cudnn,
                                                triton_decode=cudnn * 1.001)).run()
    assert d.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH
    assert d.library is not None and d.library.backend == "sdpa_cudnn"
    assert d.custom is not None and d.custom.backend == "triton_decode"
    decode = next(t for t in d.tiers if t["tier"] == DECODE)
    assert decode["trials"] > 0


def test_without_the_baseline_backend_the_decision_stands_and_states_no_baseline_speedup(
        ) -> None:
    """A CPU worker offers the math SDPA backend only: no cuDNN trial, so no confirmation
    against the baseline and no speed-up over it; the verdicts are reached all the same."""
    p = SHAPES[-1]
    cpu = ("sdpa_math", "triton", "triton_decode")
    attainable = roofline(p, CAL).attainable_us  # type: ignore[union-attr]
    forced = Policy(force_custom=True)
    d = FakeAttentionDevice(p, _sdpa(None, math=attainable * 40, triton=attainable * 20),
                            policy=forced, backends=cpu, max_trials=6).run()
    assert d.verdict == Verdict.CUSTOM_WINS
    assert d.library is not None and d.library.backend == "sdpa_math"
    assert d.reference is None and d.speedup_vs_baseline is None
    assert d.baseline == "sdpa_cudnn"
    keeps = FakeAttentionDevice(p, _sdpa(None, math=attainable * 2, flex=attainable * 1.9,
                                         triton=attainable * 20),
                                policy=Policy(), backends=("sdpa_math", "flex", "triton"),
                                max_trials=6).run()
    assert keeps.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH
    assert keeps.library is not None and keeps.library.backend == "flex"
    assert keeps.speedup_vs_baseline is None


def test_a_failed_cudnn_candidate_leaves_the_best_other_library_kernel() -> None:
    """cuDNN refuses the problem on the worker (a failed trial): the other SDPA backends and
    Flex are the library side."""
    attainable = roofline(PREFILL, CAL).attainable_us  # type: ignore[union-attr]
    d = FakeAttentionDevice(PREFILL, _sdpa(None, flash=attainable / 0.95,
                                           flex=attainable / 0.5, triton=attainable)).run()
    assert d.verdict == Verdict.LIBRARY_SUFFICIENT
    assert d.library is not None and d.library.backend == "sdpa_flash"
    assert d.speedup_vs_baseline is None
