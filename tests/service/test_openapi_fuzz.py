"""schemathesis over the API's OpenAPI schema, in-process (ASGI) on SQLite: whatever a client
sends, no answer is a 5xx and every answer matches the schema (status code documented, content
type, body, headers). Bounded: a few dozen examples per operation."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.app import create_app
from service.settings import ServiceSettings

pytestmark = pytest.mark.fuzz

_DB = Path(tempfile.mkdtemp(prefix="ks-fuzz-")) / "fuzz.db"
APP = create_app(ServiceSettings(database_url=f"sqlite:///{_DB}", dashboard=False))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance]


@schema.parametrize()
@hypothesis_settings(max_examples=25, deadline=None, derandomize=True,
                     suppress_health_check=list(HealthCheck))
def test_every_answer_is_documented_and_none_is_a_5xx(case: schemathesis.Case) -> None:
    case.call_and_validate(checks=CHECKS)


def test_the_schema_states_bounds_enums_and_security() -> None:
    doc = APP.openapi()
    gemm = next(s for s in doc["components"]["schemas"]["JobIn"]["properties"]["problem"]
                ["anyOf"] if s["title"] == "gemm problem")
    assert gemm["properties"]["m"]["minimum"] == 1 and gemm["properties"]["m"]["maximum"] > 1
    assert set(gemm["properties"]["dtype"]["enum"]) == {"bf16", "fp16", "fp32", "fp8_e4m3"}
    assert set(doc["components"]["securitySchemes"]) == {"UserToken", "WorkerToken",
                                                         "WorkerSecret"}
    submit = doc["paths"]["/v1/jobs"]["post"]
    assert {"401", "403", "413", "422", "429"} <= set(submit["responses"])
    assert submit["security"] == [{"UserToken": []}]
    assert "404" in doc["paths"]["/v1/jobs/{job_id}"]["get"]["responses"]
    assert "409" in doc["paths"]["/v1/jobs/{job_id}/cancel"]["post"]["responses"]
    device = doc["components"]["schemas"]["DeviceIn"]["properties"]["memory_bytes"]
    assert device["type"] == "integer"
