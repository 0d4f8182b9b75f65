"""What the dashboard's pages and data endpoints share: the templates and their filters, the
query parameters, Plotly's file, the problem texts and the snippets that call a tuned kernel."""

from __future__ import annotations

import importlib.util
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Path as PathParam
from fastapi import Query, Request
from fastapi.templating import Jinja2Templates

from db import dashboard as q
from search import kinds
from search.roofline import efficiency
from search.types import Problem, ProblemError
from service.errors import InvalidInput
from service.schemas import MAX_ID

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
TEMPLATES = Jinja2Templates(directory=str(HERE / "templates"))

#: Query parameters of the pages (each bad value is a 422 naming it). A filter left empty in
#: a form (``?kind=&gpu=``) means no filter.
KindQ = Annotated[str | None, Query(max_length=32, pattern=r"^[A-Za-z0-9_]*$")]
GpuQ = Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00-\x1f]*$")]
ShapeQ = Annotated[str | None, Query(max_length=100, pattern=r"^[^\x00-\x1f]*$",
                                     description="a piece of the shape, e.g. 4096x4096")]
DtypeQ = Annotated[str | None, Query(max_length=16, pattern=r"^[A-Za-z0-9_]*$")]
PageQ = Annotated[int, Query(ge=1, le=1_000_000)]
PerPageQ = Annotated[int, Query(ge=10, le=200)]
SortQ = Annotated[Literal[tuple(q.SORTS)], Query()]  # type: ignore[valid-type]
OrderQ = Annotated[Literal["asc", "desc"], Query()]
VerdictQ = Annotated[Literal[(*q.VERDICTS, q.UNDECIDED, "")] | None,  # type: ignore
                     Query()]
ProblemId = Annotated[int, PathParam(ge=1, le=MAX_ID)]


def plotly_file() -> Path | None:
    """Plotly's bundled ``plotly.min.js`` in the installed ``plotly`` package (None: absent)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "package_data" / "plotly.min.js"
    return path if path.is_file() else None


def render(request: Request, template: str, **context: Any) -> Any:
    return TEMPLATES.TemplateResponse(request, template, {"now": datetime.now(UTC), **context})


# -- filters ------------------------------------------------------------------------------------
def _number(x: Any) -> bool:
    """A finite number (a missing key in a template is ``Undefined``, not a number)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def fmt_us(us: float | None) -> str:
    if not _number(us):
        return "—"
    assert us is not None
    if us >= 10_000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.2f} µs" if us < 1000 else f"{us:.0f} µs"


def fmt_pct(x: float | None) -> str:
    return f"{100 * x:.0f}%" if _number(x) else "—"  # type: ignore[operator]


def fmt_x(x: float | None) -> str:
    return f"{x:.3f}×" if _number(x) else "—"


def fmt_secs(s: float | None) -> str:
    if not _number(s):
        return "—"
    assert s is not None
    if s >= 7200:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.0f} min"
    return f"{s:.1f} s"


def fmt_ago(t: datetime | None, now: datetime | None = None) -> str:
    if t is None:
        return "—"
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    s = ((now or datetime.now(UTC)) - t).total_seconds()
    if s < 0:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit} ago"
    return f"{s:.0f} s ago"


def fmt_time(t: datetime | None) -> str:
    return t.strftime("%Y-%m-%d %H:%M UTC") if t is not None else "—"


def share(attainable_us: float | None, median_us: float | None) -> float | None:
    """A time's share of the roofline (``search.roofline.efficiency``: none when it refutes
    it)."""
    return efficiency(attainable_us, median_us) if attainable_us else None


for _name, _fn in (("us", fmt_us), ("pct", fmt_pct), ("x", fmt_x), ("secs", fmt_secs),
                   ("ago", fmt_ago), ("time", fmt_time)):
    TEMPLATES.env.filters[_name] = _fn
TEMPLATES.env.globals["share"] = share
TEMPLATES.env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True)


# -- problems -----------------------------------------------------------------------------------
def label_of(label: str | None, key: str) -> str:
    """The shape to show: the stored label, else the key (a kind not loaded here)."""
    return label or key


def shape_label(problem: Problem) -> str | None:
    try:
        return kinds.get(problem.kind).shape_label(problem)
    except ProblemError:
        return None


def snippet(problem: Problem, gpu: str, base_url: str) -> str:
    """Python that asks this service for the served configuration and runs it through the
    kernel registry (``kernel_templates.registry``: every kind's backends, plug-ins too)."""
    fields = ",\n".join(f"    {k!r}: {v!r}" for k, v in problem.to_dict().items()
                         if v is not None)
    return "\n".join((
        "from kernel_templates import registry",
        "from search.types import Candidate, parse_problem",
        "from service.client import KernelSearchClient",
        "",
        "spec = {", fields, "}",
        f"best = KernelSearchClient({base_url!r}).best(**spec, gpu={gpu!r})",
        "problem = parse_problem(spec)",
        "inputs = registry.kernel_kind(problem.kind).make_inputs(problem, \"cuda\", seed=0)",
        "run = registry.make_callable(Candidate(problem, best[\"backend\"], best[\"config\"]),",
        "                             inputs)",
        "run()  # writes the product into inputs.out",
    ))


def map_axes(kind: str | None) -> tuple[str, str] | None:
    """The shapes map's axes of ``kind``; a 422 naming ``kind`` when it is not a kind."""
    if not kind:
        return None
    try:
        return kinds.get(kind).axes()
    except ProblemError as exc:
        raise InvalidInput(["query", "kind"], exc.message) from exc
