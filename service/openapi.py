"""The OpenAPI schema's problem: each registered kind's fields with their types, bounds and
choices (from the problem dataclass's fields and their ``metadata``: ``help``, ``choices``,
``max``), so a client or a fuzzer sees what ``POST /v1/jobs`` takes. Validation stays the
kind's (``ProblemKind.parse``), whose 422 names the field and the rule."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from fastapi import FastAPI

from search import kinds
from search.kinds.base import MAX_TEXT, ProblemKind

__all__ = ["best_parameters", "install", "problem_schema"]

#: An integer field's largest value unless its metadata says (a 32-bit signed index).
MAX_INT = 2**31 - 1


def _field_schema(f: dataclasses.Field[Any], hint: Any) -> dict[str, Any]:
    meta = f.metadata
    nullable = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable, hint = len(args) < len(typing.get_args(hint)), args[0]
    out: dict[str, Any]
    if "choices" in meta:
        out = {"enum": list(meta["choices"])}
    elif hint is bool:
        out = {"type": "boolean"}
    elif hint is int:
        out = {"type": "integer", "minimum": 1, "maximum": int(meta.get("max", MAX_INT))}
    elif hint is float:
        out = {"type": "number", "exclusiveMinimum": 0}
    else:
        out = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}
    if "help" in meta:
        out["description"] = str(meta["help"])
    return {"anyOf": [out, {"type": "null"}]} if nullable else out


def problem_schema(kind: ProblemKind) -> dict[str, Any]:
    """The JSON schema of one kind's problem as ``POST /v1/jobs`` takes it."""
    hints = typing.get_type_hints(kind.problem_type)
    props: dict[str, Any] = {"kind": {"const": kind.name}}
    required = [] if kind.name == "gemm" else ["kind"]  # a problem without kind is GEMM
    for f in dataclasses.fields(kind.problem_type):
        if not f.init:
            continue
        props[f.name] = _field_schema(f, hints[f.name])
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    return {"title": f"{kind.name} problem", "type": "object", "properties": props,
            "required": required, "additionalProperties": False}


def best_parameters() -> list[dict[str, Any]]:
    """``GET /v1/best``'s query parameters besides ``kind``, ``gpu`` and ``exact``: every
    registered kind's problem fields (a field of several kinds takes any of their schemas),
    each optional here: which ones a question needs depends on its ``kind``."""
    by_name: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for name, kind in sorted(kinds.kinds().items()):
        for field, sch in problem_schema(kind)["properties"].items():
            if field != "kind":
                by_name.setdefault(field, []).append((name, _not_null(sch)))
    out = []
    for field, found in by_name.items():
        schemas = [sch for i, (_, sch) in enumerate(found) if sch not in
                   [other for _, other in found[:i]]]
        owners = ", ".join(name for name, _ in found)
        out.append({"name": field, "in": "query", "required": False,
                    "description": f"a field of the problem ({owners})",
                    "schema": schemas[0] if len(schemas) == 1 else {"anyOf": schemas}})
    return out


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A field's schema without its null choice (a query parameter is absent instead)."""
    options = [o for o in schema.get("anyOf", [schema]) if o != {"type": "null"}]
    return options[0] if len(options) == 1 else {"anyOf": options}


def install(app: FastAPI) -> None:
    """Describe ``JobIn.problem`` by the kinds registered when the schema is first built."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = plain()
            job_in = schema["components"]["schemas"]["JobIn"]["properties"]
            job_in["problem"] = {
                "description": "the problem: `kind` (default gemm) and that kind's fields",
                "anyOf": [problem_schema(k) for _, k in sorted(kinds.kinds().items())]}
            best = schema["paths"].get("/v1/best", {}).get("get")
            if best is not None:
                best.setdefault("parameters", []).extend(best_parameters())
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
