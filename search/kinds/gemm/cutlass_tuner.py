"""Optuna over the CUTLASS library GEMMs of one problem on one GPU model, minding compile time.

A CUTLASS configuration (``search.kinds.gemm.cutlass_space``) is an operation, fixed at compile
time, plus three runtime knobs. Two things make it unlike the Triton space:

- **The space is sparse.** About 130 operations serve a problem. One categorical over their
  names would teach TPE nothing about the next name, so the study is parametrised by the
  factors an operation is made of (tile, cluster, kernel schedule, epilogue schedule, tile
  scheduler, whether it reads a C operand) plus the knobs (raster, swizzle, splits). Most
  combinations of factors name no operation; those, and those that break
  ``cutlass_gemm.violations``, are told to Optuna as infeasible, so it learns where the
  operations are. When TPE keeps missing, an untried configuration is enqueued instead: an
  operation near the best one measured so far (fewest differing factors, then rank), or
  every third time a knob setting of that best one. So every proposal call makes progress and
  :attr:`exhausted` means "nothing new is left", never "TPE was unlucky".
- **Compiling costs more than measuring.** An operation that is not built yet costs an nvcc run
  (about a minute); its knob variants then cost nothing. The caller passes a
  :class:`CompileBudget`: compile-seconds left, the operations already built, the ones whose
  compile is under way. An unbuilt operation is proposed only while the budget covers the
  estimated compile time (the mean of the compiles this study has seen, else
  :data:`DEFAULT_COMPILE_S`); after that only knob variants of built operations are proposed,
  the best-measured operations first.

The first proposals of a new study are the ranked seeds (``cutlass_gemm.seeds``:
nvMatmulHeuristics' order where it knows the GPU, else the analytic one), so the first compiled
batch is the most promising one. Nothing here touches a GPU or nvcc.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from search.kinds.gemm import cutlass_space as cutlass_gemm
from search.kinds.gemm.cutlass_space import OpLike
from search.kinds.gemm.spec import GemmProblem
from search.optimizer import CompileBudget, Proposal, StudyTuner
from search.types import Measurement, config_key

__all__ = ["DEFAULT_COMPILE_S", "DIMS", "CompileBudget", "CutlassTuner", "cutlass_study_name",
           "op_dims"]

#: Compile time assumed for an unbuilt operation before this study has timed one (nvcc on one
#: SM90 CUTLASS GEMM takes about a minute).
DEFAULT_COMPILE_S = 60.0
#: A measurement whose ``compile_s`` is at least this was a real compile, not a cache hit.
_COLD_S = 1.0
#: The factors of an operation, in the order they are asked.
DIMS = ("tile", "cluster", "kernel_schedule", "epilogue_schedule", "tile_scheduler", "c_source")
#: Asks of the sampler per proposal before the next untried configuration is enqueued instead
#: (each miss is an ask and a tell in the database; few combinations of factors name an
#: operation, so more tries mostly buy more misses). Fewer once the operation is fixed: then
#: only knobs are sampled, and a non-persistent operation has a single setting.
_TPE_TRIES = 4
_TPE_TRIES_KNOBS = 2


def op_dims(op: OpLike) -> dict[str, str]:
    """The factored parameters of ``op`` (strings, so they are stable categorical choices)."""
    return {"tile": "x".join(map(str, op.tile)), "cluster": "x".join(map(str, op.cluster)),
            "kernel_schedule": op.kernel_schedule, "epilogue_schedule": op.epilogue_schedule,
            "tile_scheduler": op.tile_scheduler,
            "c_source": "void" if op.dtype_c is None else "c"}


def _dims_key(dims: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(dims[d]) for d in DIMS)


def _widest(ops: Iterable[OpLike]) -> list[OpLike]:
    """One operation per factored point. Alignment variants of one point differ only in how
    narrow an operand they accept; every one left after ``ops_for`` serves the problem, and the
    widest alignment loads fastest, so the others would only be slower twins."""
    best: dict[tuple[str, ...], OpLike] = {}
    for op in ops:
        key = _dims_key(op_dims(op))
        cur = best.get(key)
        width = (getattr(op, "alignment_a", 0), getattr(op, "alignment_b", 0))
        if cur is None or width > (getattr(cur, "alignment_a", 0), getattr(cur, "alignment_b", 0)):
            best[key] = op
    return sorted(best.values(), key=lambda op: op.name)


def cutlass_study_name(problem: GemmProblem, gpu_model: str, ops: Sequence[OpLike]) -> str:
    """One study per problem, GPU model and operation set: a CUTLASS upgrade that changes the
    operations starts a new study (Optuna refuses new choices for an existing parameter)."""
    digest = hashlib.sha256("\n".join(sorted(op.name for op in ops)).encode()).hexdigest()[:10]
    return f"cutlass-gemm|{problem.key()}|{gpu_model}|{digest}"


class CutlassTuner(StudyTuner):
    """Proposes CUTLASS configurations for one problem on one GPU model (see the module
    docstring). ``ops``: the operations that serve the problem (the declared catalogue
    filtered by ``search.kinds.gemm.cutlass_catalogue.filter_ops``, or on a GPU host
    ``kernel_templates.gemm.cutlass.ops_for``); ``n_seeds``: how many ranked seeds a new study
    starts with."""

    def __init__(self, storage_url: str, problem: GemmProblem, gpu_model: str,
                 ops: Sequence[OpLike], seed: int = 0, n_seeds: int = 8) -> None:
        self.problem = problem
        self.gpu_model = gpu_model
        self._ops = {op.name: op for op in _widest(ops)}
        self._by_dims = {_dims_key(op_dims(op)): op for op in self._ops.values()}
        gpu = cutlass_gemm.heuristics_gpu(gpu_model)
        ranking = cutlass_gemm.rank(problem, self._ops.values(), gpu)
        #: operations fastest first by estimate: the enqueue order when TPE keeps missing
        self._ranked = [r.op for r in ranking]
        self._rank = {name: i for i, name in enumerate(self._ranked)}
        self._configs = {name: cutlass_gemm.configs(problem, op)
                         for name, op in self._ops.items()}
        self._dists: dict[str, CategoricalDistribution] = {
            d: CategoricalDistribution(sorted({op_dims(op)[d] for op in self._ops.values()}))
            for d in DIMS}
        self._dists.update({
            "raster": CategoricalDistribution(list(cutlass_gemm.RASTERS)),
            "swizzle": CategoricalDistribution(list(cutlass_gemm.SWIZZLES)),
            "splits": CategoricalDistribution(list(cutlass_gemm.SPLITS))})
        super().__init__(storage_url, cutlass_study_name(problem, gpu_model,
                                                         list(self._ops.values())), seed)
        if self.fresh:
            for cfg in cutlass_gemm.seeds(problem, self._ops.values(), n_seeds, gpu,
                                          ranked=ranking):
                self._study.enqueue_trial(self.params_of(cfg), skip_if_exists=True)

    # -- the space ----------------------------------------------------------------------------
    @property
    def ops(self) -> dict[str, OpLike]:
        return dict(self._ops)

    def params_of(self, config: dict[str, Any]) -> dict[str, Any]:
        """The study's parameters of a configuration."""
        return {**op_dims(self._ops[config["op"]]),
                **{k: config[k] for k in cutlass_gemm.KNOBS}}

    def config_of(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The configuration the parameters stand for; ``None`` when no operation has those
        factors."""
        op = self._by_dims.get(_dims_key(params))
        if op is None:
            return None
        return {"op": op.name, **{k: params[k] for k in cutlass_gemm.KNOBS}}

    def _config_of(self, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
        return dict(trial.user_attrs.get("config") or self.config_of(trial.params) or {})

    # -- compile cost -------------------------------------------------------------------------
    def compile_estimate_s(self) -> float:
        """What compiling one more operation is expected to take: the mean of the real
        compiles this study has been told of, else :data:`DEFAULT_COMPILE_S`."""
        return self._compile_estimate(self._study.get_trials(deepcopy=False,
                                                             states=(TrialState.COMPLETE,)))

    @staticmethod
    def _compile_estimate(trials: Sequence[optuna.trial.FrozenTrial]) -> float:
        seen = [float(t.user_attrs["compile_s"]) for t in trials
                if t.state == TrialState.COMPLETE
                and float(t.user_attrs.get("compile_s") or 0.0) >= _COLD_S]
        return sum(seen) / len(seen) if seen else DEFAULT_COMPILE_S

    # -- proposing ----------------------------------------------------------------------------
    def propose(self, n: int, known: Callable[[dict[str, Any]], Measurement | None],
                budget: CompileBudget | None = None) -> list[Proposal]:
        """Up to ``n`` configurations never measured for this problem and GPU model, within
        ``budget`` (default: no compile limit).

        Infeasible combinations and configurations ``known`` has a measurement for are told to
        the study at once and not returned; so are operations that failed to compile before.
        Fewer than ``n`` come back only when no untried configuration is left that the budget
        allows: then :attr:`exhausted` is set.
        """
        if n <= 0:
            return []
        budget = budget or CompileBudget()
        trials = self._study.get_trials(deepcopy=False)
        tried = {config_key(t.user_attrs["config"]) for t in trials
                 if "config" in t.user_attrs and t.state in (TrialState.COMPLETE,
                                                             TrialState.RUNNING)}
        broken = {t.user_attrs["config"]["op"] for t in trials if "config" in t.user_attrs
                  and t.user_attrs.get("status") == "compile_error"}
        # an operation whose compile is under way is charged once, then its knobs are free
        built = set(budget.built) | set(budget.pending)
        estimate = self._compile_estimate(trials)  # one read of the study per call
        left = budget.left_s - estimate * len(budget.pending - budget.built)
        best_of = self._best_per_op(trials)
        out: list[Proposal] = []
        self.exhausted = False
        while len(out) < n:
            affordable = left >= estimate
            allowed = None if affordable else (built - broken)
            got = self._one(known, tried, broken, built, allowed, best_of)
            if got is None:
                self.exhausted = True
                break
            proposal, cold = got
            out.append(proposal)
            if cold:
                left -= estimate
                built.add(proposal.config["op"])
        return out

    def _one(self, known: Callable[[dict[str, Any]], Measurement | None], tried: set[str],
             broken: set[str], built: set[str], allowed: set[str] | None,
             best_of: dict[str, float]) -> tuple[Proposal, bool] | None:
        """One new proposal and whether its operation needs compiling; ``None`` when no
        untried configuration of the ``allowed`` operations (``None``: any) is left."""
        built_only = allowed is not None
        if not built_only and len(tried) % 2 == 0:
            # every other proposal: an untried neighbour of the best operation so far
            cfg = self._neighbour(tried, broken, best_of)
            if cfg is not None:
                self._study.enqueue_trial(self.params_of(cfg))
                got = self._judge(self._study.ask(self._dists), known, tried, broken, built,
                                  allowed)
                if got is not None:
                    return got
        for _ in range(_TPE_TRIES_KNOBS if built_only else _TPE_TRIES):
            if built_only:
                focus = self._focus(allowed or set(), tried, best_of)
                if focus is None:
                    return None
                # the operation is fixed; the sampler chooses its knobs
                self._study.enqueue_trial(op_dims(self._ops[focus]))
            got = self._judge(self._study.ask(self._dists), known, tried, broken, built,
                              allowed)
            if got is not None:
                return got
        while True:
            cfg = self._next_untried(tried, broken, allowed, best_of)
            if cfg is None:
                return None
            self._study.enqueue_trial(self.params_of(cfg))
            got = self._judge(self._study.ask(self._dists), known, tried, broken, built,
                              allowed)
            if got is not None:
                return got

    def _judge(self, trial: optuna.Trial, known: Callable[[dict[str, Any]], Measurement | None],
               tried: set[str], broken: set[str], built: set[str], allowed: set[str] | None
               ) -> tuple[Proposal, bool] | None:
        """Tell the study at once about a trial that will not be measured (and return
        ``None``), or return it as a proposal."""
        cfg = self.config_of(trial.params)
        if cfg is None:
            self._infeasible(trial, "no CUTLASS operation has these factors")
            return None
        trial.set_user_attr("config", cfg)
        key = config_key(cfg)
        reasons = cutlass_gemm.violations(self.problem, cfg, self._ops)
        if cfg["op"] in broken:
            reasons = [*reasons, "the operation failed to compile before"]
        if reasons:
            tried.add(key)
            self._infeasible(trial, "; ".join(reasons))
            return None
        if key in tried or (allowed is not None and cfg["op"] not in allowed):
            # In flight or done already, or an unbuilt operation once the compile budget is
            # spent: not evidence about the configuration, so no value is told.
            self._study.tell(trial, state=TrialState.PRUNED)
            return None
        tried.add(key)
        previous = known(cfg)
        if previous is not None:
            self._tell(trial.number, previous, reused=True)
            return None
        cold = cfg["op"] not in built
        trial.set_user_attr("cold", cold)
        return Proposal(trial.number, cfg), cold

    def _focus(self, allowed: set[str], tried: set[str], best_of: dict[str, float]
               ) -> str | None:
        """The built operation whose knobs to tune next: the best-measured one that has an
        untried knob setting left (unmeasured ones after, in rank order)."""
        for name in self._order(allowed, best_of):
            if any(config_key(c) not in tried for c in self._configs[name]):
                return name
        return None

    def _next_untried(self, tried: set[str], broken: set[str], allowed: set[str] | None,
                      best_of: dict[str, float]) -> dict[str, Any] | None:
        """The next configuration when the sampler keeps missing: mostly a new operation
        near the best one measured so far, sometimes a knob setting of that best one.

        New operations come in order of how many factors they differ in from the incumbent
        (the best-measured operation), then by rank: the recorded H100 runs show that the
        winner is usually the incumbent with one factor changed (its ping-pong twin, the
        other cluster, the next tile), while walking the rank order spends the budget on
        operations like the ones that already lost. Every third fallback tunes the
        incumbent's runtime knobs instead (free: no compile). Once the budget allows no
        compile (``allowed`` is set), knob settings of the built operations, best first."""
        if allowed is not None:
            return self._first_untried(self._order(allowed, best_of), tried, broken)
        if best_of and len(tried) % 3 == 2:
            cfg = self._first_untried([min(best_of, key=best_of.__getitem__)], tried, broken)
            if cfg is not None:
                return cfg
        nearest = self._nearest_fresh(tried, broken, best_of)
        if nearest is not None:
            return nearest[1]
        return self._first_untried(self._order(set(best_of), best_of) + self._ranked, tried,
                                   broken)

    def _neighbour(self, tried: set[str], broken: set[str], best_of: dict[str, float]
                   ) -> dict[str, Any] | None:
        """The default configuration of the best-ranked untried operation that differs from
        the incumbent (the best-measured operation) in exactly one factor, if any."""
        nearest = self._nearest_fresh(tried, broken, best_of) if best_of else None
        return nearest[1] if nearest is not None and nearest[0] == 1 else None

    def _nearest_fresh(self, tried: set[str], broken: set[str], best_of: dict[str, float]
                       ) -> tuple[int, dict[str, Any]] | None:
        """The operation never measured nearest the incumbent (fewest factors differing from
        the best-measured operation, then rank; by rank alone before anything was measured):
        how many factors differ, and its default configuration, still untried."""
        home = op_dims(self._ops[min(best_of, key=best_of.__getitem__)]) if best_of else None

        def distance(name: str) -> int:
            dims = op_dims(self._ops[name])
            return 0 if home is None else sum(dims[d] != home[d] for d in DIMS)

        fresh = [(distance(n), self._rank[n], n) for n in self._ranked
                 if self._configs[n] and n not in broken and n not in best_of
                 and config_key(self._configs[n][0]) not in tried]
        if not fresh:
            return None
        distance, _, name = min(fresh)
        return distance, self._configs[name][0]

    def _first_untried(self, names: Sequence[str], tried: set[str], broken: set[str]
                       ) -> dict[str, Any] | None:
        for name in names:
            if name in broken:
                continue
            for cfg in self._configs[name]:
                if config_key(cfg) not in tried:
                    return cfg
        return None

    def _order(self, names: set[str], best_of: dict[str, float]) -> list[str]:
        return sorted((x for x in names if x in self._ops),
                      key=lambda x: (best_of.get(x, math.inf), self._rank.get(x, len(self._rank))))

    def _best_per_op(self, trials: Sequence[optuna.trial.FrozenTrial]) -> dict[str, float]:
        out: dict[str, float] = {}
        for t in trials:
            cfg = t.user_attrs.get("config")
            if cfg and self._feasible(t):
                out[cfg["op"]] = min(out.get(cfg["op"], math.inf), float(t.value))
        return out
