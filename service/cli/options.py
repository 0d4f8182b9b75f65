"""The options the commands share, spelled once.

**Problem options** are derived from the registered kinds (``search.kinds``, plug-ins named in
``KS_PLUGINS`` included): ``--kind`` and one option per field of each kind's problem type, typed
from its annotation, described from the field's ``help`` metadata, with each kind's default;
``tune``, ``submit`` and ``best`` take them through :func:`with_problem`, and a new kind's fields
become options with no change here. **Job options** (budget, backends, mode, policy) are
``tune``'s and ``submit``'s; ``--json`` and ``--url`` are every command's that prints data or
talks to a service. A bad value is a usage error naming the option and the rule.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import sys
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import typer

from search import kinds
from search.decision import Policy
from search.kinds.base import ProblemKind
from search.types import Problem, ProblemError

PROBLEM_PANEL = "Problem: --kind, then that kind's fields"
JOB_PANEL = "Job"
OUT_PANEL = "Output"

Mode = Literal["agent", "force", "full"]
#: How each mode sets the policy.
MODES: dict[str, dict[str, bool]] = {"agent": {}, "force": {"force_custom": True},
                                     "full": {"full_search": True}}

# -- job and output options (``Annotated`` types, shared by name) --------------------------------
Trials = Annotated[int | None, typer.Option(
    min=1, max=10_000, rich_help_panel=JOB_PANEL,
    help="custom (Triton) configurations to measure at most (default: the service's, 64)")]


def _positive(value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise typer.BadParameter(f"must be greater than 0, got {value}")
    return value


Seconds = Annotated[float | None, typer.Option(
    callback=_positive, rich_help_panel=JOB_PANEL,
    help="stop the job after this long, decided on what was measured")]
Backends = Annotated[str | None, typer.Option(
    rich_help_panel=JOB_PANEL,
    help="comma-separated backends of the kind, or 'all' (default: every backend of the kind "
         "except a library-side search, i.e. CUTLASS for gemm, which needs nvcc and a compile "
         "budget)")]
ModeOpt = Annotated[Mode, typer.Option(
    rich_help_panel=JOB_PANEL,
    help="agent: stop when the library is near the roofline; force: always search custom "
         "kernels; full: search the whole budget, no early stops")]
Threshold = Annotated[float | None, typer.Option(
    callback=_positive, max=1.0, rich_help_panel=JOB_PANEL,
    help=f"library efficiency that counts as sufficient (default {Policy().threshold})")]
AllowTf32 = Annotated[bool, typer.Option(
    "--allow-tf32", rich_help_panel=JOB_PANEL, help="fp32 inputs may be multiplied in tf32")]
PolicyItems = Annotated[list[str] | None, typer.Option(
    "--policy", rich_help_panel=JOB_PANEL, metavar="KEY=VALUE",
    help="any other policy field, repeatable (e.g. --policy patience=4); a JSON object works "
         "too. Fields: " + ", ".join(f.name for f in dataclasses.fields(Policy)))]
Allow = Annotated[list[str] | None, typer.Option(
    "--allow", rich_help_panel=JOB_PANEL, metavar="PRECISION=BOUND",
    help="a precision below the input's that kernels may compute in, with the largest "
         "relative error allowed, repeatable: e.g. --allow fp8_e4m3=0.05 for a bf16 or fp16 "
         "GEMM (policy.allow; default: the input precision only)")]
Gpu = Annotated[str | None, typer.Option(
    rich_help_panel=JOB_PANEL, help="GPU model (as workers report it; default: any)")]
Url = Annotated[str | None, typer.Option(
    rich_help_panel=OUT_PANEL, help="service URL (default: KS_URL, http://127.0.0.1:8000)")]
Token = Annotated[str | None, typer.Option(
    rich_help_panel=OUT_PANEL, help="your user token, one of the service's KS_API_TOKENS "
    "(default: KS_TOKEN); needed to submit and cancel where the service has tokens")]
JsonOut = Annotated[bool, typer.Option(
    "--json", rich_help_panel=OUT_PANEL, help="print JSON (for machines) instead of tables")]

#: click's UsageError as the installed Typer raises it (click itself, or the copy Typer 0.29
#: vendors): a usage error without a value to call invalid, e.g. a missing option.
UsageError: type[Exception] = typer.BadParameter.__base__  # type: ignore[assignment]

#: Command options a problem field may not shadow (such a field's flag becomes --<kind>-<field>).
RESERVED = frozenset({"kind", "trials", "seconds", "backends", "mode", "threshold", "allow_tf32",
                      "policy", "allow", "exact", "gpu", "url", "json", "out", "db",
                      "interpret", "wait", "help"})


# -- problem options ----------------------------------------------------------------------------
@dataclass(frozen=True)
class FieldOption:
    """One problem option: a field of one or more kinds' problem types."""

    name: str  # the keyword the command receives (``p_<field>``)
    field: str
    flag: str
    type: type
    #: kind -> "required" or "default <value>"
    kinds: dict[str, str]
    help: str


def _base(hint: Any) -> type:
    """``int`` of ``int | None``; ``str`` where the kinds disagree or the type is unusual."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] if (
        typing.get_origin(hint) in (typing.Union, types.UnionType)) else [hint]
    return args[0] if len(args) == 1 and args[0] in (bool, int, float, str) else str


def field_options() -> list[FieldOption]:
    """Every registered kind's problem fields as options, in registration order."""
    found: dict[str, dict[str, Any]] = {}
    for kind in kinds.kinds().values():
        hints = typing.get_type_hints(kind.problem_type)
        for f in dataclasses.fields(kind.problem_type):
            if not f.init:
                continue
            flag_name = f.name if f.name not in RESERVED else f"{kind.name}_{f.name}"
            entry = found.setdefault(flag_name, {"field": f.name, "types": set(), "kinds": {},
                                                 "help": {}})
            entry["types"].add(_base(hints[f.name]))
            required = (f.default is dataclasses.MISSING
                        and f.default_factory is dataclasses.MISSING)
            entry["kinds"][kind.name] = (
                "required" if required else "" if f.default is None  # the help says how
                else f"default {_text(f.default)}")
            entry["help"][kind.name] = str(f.metadata.get("help", ""))
    out = []
    for flag_name, e in found.items():
        tp = next(iter(e["types"])) if len(e["types"]) == 1 else str
        out.append(FieldOption(f"p_{flag_name}", e["field"], "--" + flag_name.replace("_", "-"),
                               tp, e["kinds"], _help(e["help"], e["kinds"])))
    return out



def _help(helps: dict[str, str], per_kind: dict[str, str]) -> str:
    texts = set(helps.values())
    if len(texts) == 1:
        text = texts.pop()
        where = "; ".join(f"{k}: {v}" if v else k for k, v in per_kind.items())
        return f"{text} ({where})" if text else f"({where})"
    return "; ".join(f"{k}: {helps[k] or k}" + (f" ({per_kind[k]})" if per_kind[k] else "")
                     for k in per_kind)


def _parameter(opt: FieldOption) -> inspect.Parameter:
    decl = opt.flag if opt.type is not bool else f"{opt.flag}/--no-{opt.flag[2:]}"
    info = typer.Option(decl, help=opt.help, rich_help_panel=PROBLEM_PANEL, show_default=False)
    return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[opt.type | None, info])  # type: ignore[name-defined]


@dataclass(frozen=True)
class ProblemArgs:
    """What the problem options said: the kind and the fields given (by field name)."""

    kind: ProblemKind
    given: dict[str, Any]
    flags: dict[str, str]

    def parse(self) -> Problem:
        """The problem, or a usage error naming the option and the rule."""
        fields = [f for f in dataclasses.fields(self.kind.problem_type) if f.init]
        for name in self.given:
            if name not in {f.name for f in fields}:
                own = ", ".join(self.flag(f.name) for f in fields)
                raise typer.BadParameter(
                    f"not an option of {_a(self.kind.name)} problem; its options: {own}",
                    param_hint=f"'{self.flag(name)}'")
        missing = [self.flag(f.name) for f in fields if f.name not in self.given
                   and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise UsageError(
                f"Missing option{'s' if len(missing) > 1 else ''} {', '.join(missing)}: "
                f"{_a(self.kind.name)} problem needs {'them' if len(missing) > 1 else 'it'}")
        try:
            # read by the kind's own field types, as a query string is: an option two kinds
            # type differently arrives as text
            return kinds.parse_query(self.kind, {k: _text(v) for k, v in self.given.items()})
        except ProblemError as exc:
            raise self.error(exc) from None

    def flag(self, field: str) -> str:
        return self.flags.get(field) or "--" + field.replace("_", "-")

    def error(self, exc: ProblemError) -> typer.BadParameter:
        """A kind's ``ProblemError`` as a usage error naming the option."""
        if exc.field == "backends":
            return typer.BadParameter(exc.message, param_hint="'--backends'")
        message = (f"{_a(self.kind.name)} problem needs it" if exc.message == "field required"
                   else exc.message)
        return typer.BadParameter(message, param_hint=f"'{self.flag(exc.field)}'")


def with_problem(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A command ``fn(args: ProblemArgs, ...)`` that takes ``--kind`` and every kind's fields
    as options (the signature Typer reads is ``fn``'s own options plus those)."""
    opts = field_options()
    names = sorted(kinds.kinds())
    kind_param = inspect.Parameter(
        "kind", inspect.Parameter.KEYWORD_ONLY, default="gemm",
        annotation=Annotated[Literal[tuple(names)], typer.Option(  # type: ignore[valid-type]
            rich_help_panel=PROBLEM_PANEL,
            help="the problem's kind: " + ", ".join(names))])
    own = inspect.signature(fn, eval_str=True)
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own.parameters.values()
              if p.name != "args"]

    @functools.wraps(fn)
    def command(**kw: Any) -> Any:
        kind = kinds.get(kw.pop("kind"))
        given = {o.field: v for o in opts if (v := kw.pop(o.name)) is not None}
        # a field several kinds share under a renamed flag belongs to the kind it names
        flags = {o.field: o.flag for o in opts if kind.name in o.kinds}
        return fn(args=ProblemArgs(kind, given, flags), **kw)

    del command.__wrapped__  # Typer must read the signature below, not fn's
    command.__signature__ = own.replace(  # type: ignore[attr-defined]
        parameters=[kind_param, *(_parameter(o) for o in opts), *params])
    command.__annotations__ = {}
    return command


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _a(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


# -- job options --------------------------------------------------------------------------------
def tune_default_backends(kind: ProblemKind) -> list[str]:
    """Every backend of the kind but its library-side search (CUTLASS for GEMM)."""
    searched = kind.roles.searched
    return [b for b in kind.backends if b != searched]


def backends_of(kind: ProblemKind, text: str | None) -> list[str]:
    """``--backends`` read against the kind (default: :func:`tune_default_backends`)."""
    if text is None:
        return tune_default_backends(kind)
    if text.strip() == "all":
        return list(kind.backends)
    chosen = [b.strip() for b in text.split(",") if b.strip()]
    unknown = [b for b in chosen if b not in kind.backends]
    if unknown or not chosen:
        raise typer.BadParameter(
            f"{'unknown backend ' + repr(unknown[0]) if unknown else 'none given'} for a "
            f"{kind.name} problem; one of {', '.join(kind.backends)}, or all",
            param_hint="'--backends'")
    return chosen


def allow_of(items: Sequence[str] | None) -> dict[str, dict[str, float]]:
    """``--allow PRECISION=BOUND`` values as ``policy.allow`` (a malformed one is refused)."""
    allow: dict[str, dict[str, float]] = {}
    for item in items or ():
        name, sep, raw = item.partition("=")
        try:
            bound = float(raw)
        except ValueError:
            bound = None
        if not sep or not name.strip() or bound is None:
            raise typer.BadParameter(f"{item!r} is not PRECISION=BOUND (e.g. fp8_e4m3=0.05)",
                                     param_hint="'--allow'")
        allow[name.strip()] = {"max_rel_error": bound}
    return allow


def policy_of(mode: str, threshold: float | None, allow_tf32: bool,
              items: Sequence[str] | None, allow: Sequence[str] | None = None
              ) -> dict[str, Any]:
    """The job's policy from ``--mode``, ``--threshold``, ``--allow-tf32``, ``--allow`` and
    ``--policy``, checked as the service checks it (``service.schemas.PolicyIn``)."""
    from pydantic import ValidationError

    from service.schemas import PolicyIn

    policy: dict[str, Any] = {}
    for item in items or ():
        policy.update(_policy_item(item))
    allowed = allow_of(allow)
    if allowed:
        if not isinstance(policy.get("allow", {}), dict):
            raise typer.BadParameter("allow must be an object", param_hint="'--policy'")
        policy["allow"] = {**policy.get("allow", {}), **allowed}
    named = {**{k: (v, f"--mode {mode}") for k, v in MODES[mode].items()},
             **({"threshold": (threshold, "--threshold")} if threshold is not None else {}),
             **({"allow_tf32": (True, "--allow-tf32")} if allow_tf32 else {})}
    for key, (value, option) in named.items():
        if key in policy and policy[key] != value:
            raise typer.BadParameter(f"{key}={json.dumps(policy[key])} contradicts {option}",
                                     param_hint="'--policy'")
        policy[key] = value
    try:
        PolicyIn.model_validate(policy)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "policy"
        hint = "'--allow'" if allowed and err["loc"][:1] == ("allow",) else "'--policy'"
        raise typer.BadParameter(f"{where}: {err['msg']}", param_hint=hint) from None
    return policy


def check_policy(args: ProblemArgs, problem: Problem, policy: dict[str, Any],
                 backends: Sequence[str]) -> None:
    """A lower precision no backend computes ``problem`` in is refused here, as the service
    would (``ProblemKind.check_policy``), naming ``--allow``."""
    try:
        args.kind.check_policy(problem, Policy.from_dict(policy), backends)
    except ProblemError as exc:
        raise typer.BadParameter(f"{exc.field}: {exc.message}", param_hint="'--allow'"
                                 ) from None


def _policy_item(item: str) -> dict[str, Any]:
    if item.lstrip().startswith("{"):
        try:
            value = json.loads(item)
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(f"not a JSON object: {exc}", param_hint="'--policy'"
                                     ) from None
        if not isinstance(value, dict):
            raise typer.BadParameter("not a JSON object", param_hint="'--policy'")
        return value
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="'--policy'")
    try:
        value = json.loads(raw)  # numbers, true/false
    except json.JSONDecodeError:
        value = raw
    return {key.strip(): value}


def budget_of(trials: int | None, seconds: float | None) -> dict[str, Any] | None:
    budget: dict[str, Any] = {}
    if trials is not None:
        budget["max_trials"] = trials
    if seconds is not None:
        budget["max_seconds"] = seconds
    return budget or None


def dump(data: Any) -> None:
    """JSON for machines, on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
