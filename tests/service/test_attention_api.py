"""Attention through the HTTP API: a job submitted, leased and decided with FAKE measurements
(the ``driver`` and the fake tuners; no kernel runs), its best served by ``GET /v1/best``, and
impossible specs refused with a 422 naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from search.kinds.attention import ATTENTION

ISSUE = {"kind": "attention", "batch": 8, "heads": 32, "kv_heads": 8, "s_q": 4096,
         "s_kv": 4096, "d": 128, "causal": True, "dtype": "bf16"}
QUERY = ("/v1/best?kind=attention&batch=8&heads=32&kv_heads=8&s_q=4096&s_kv=4096&d=128"
         "&causal=true&dtype=bf16")
SDPA = ["sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "sdpa_math", "flex", "triton"]


def _post(client: TestClient, problem: dict[str, Any], **extra: Any) -> Any:
    return client.post("/v1/jobs", json={"problem": problem, **extra})


def test_an_attention_job_runs_to_a_decision_and_is_served(driver: Any) -> None:
    job = driver.submit(problem=ISSUE, budget={"max_trials": 4})
    assert job["problem_key"].startswith("attention:b8:h32:kv8:q4096:k4096:d128:causal:bf16:")
    assert job["backends"] == list(ATTENTION.backends)
    wid = driver.register(backends=SDPA)
    times = {"sdpa_cudnn": 2000.0, "sdpa_flash": 3400.0, "sdpa_efficient": 6600.0,
             "sdpa_math": 40000.0, "flex": 2800.0}
    driver.run_all(wid, median_of=lambda c: times.get(c["backend"], 2500.0 + c["id"]))
    done = driver.job(job["id"])
    assert done["status"] == "done", done
    decision = done["decision"]
    assert decision["baseline"] == "sdpa_cudnn"
    assert decision["verdict"] == "library_wins_after_search"
    assert done["library_best"]["backend"] == "sdpa_cudnn"
    assert done["custom_best"]["backend"] == "triton"
    assert {t["backend"] for t in decision["library_trials"]} == set(times)
    assert [t["tier"] for t in decision["tiers"]] == ["flash", "decode"]
    r = driver.http.get(QUERY)
    assert r.status_code == 200, r.text
    assert r.json()["backend"] == "sdpa_cudnn"


def test_a_worker_leases_only_the_backends_it_offers(driver: Any) -> None:
    """A CPU-like worker offering the math backend and Triton binds the job to those: it never
    gets a cuDNN candidate, and the decision has no baseline trial to state a speed-up over."""
    small = {"kind": "attention", "batch": 1, "heads": 2, "kv_heads": 1, "s_q": 32,
             "s_kv": 48, "d": 16, "causal": True, "dtype": "fp16"}
    job = driver.submit(problem=small, budget={"max_trials": 3})
    wid = driver.register(backends=["sdpa_math", "triton"])
    seen: set[str] = set()

    def median_of(c: dict[str, Any]) -> float:
        seen.add(c["backend"])
        return 500.0 if c["backend"] == "sdpa_math" else 400.0 + c["id"]

    driver.run_all(wid, median_of=median_of)
    done = driver.job(job["id"])
    assert done["status"] == "done", done
    assert seen == {"sdpa_math", "triton"}
    assert done["library_best"]["backend"] == "sdpa_math"
    assert done["decision"]["speedup_vs_cublas"] is None


def test_best_of_a_problem_never_tuned_is_404(client: TestClient) -> None:
    assert client.get(QUERY).status_code == 404


@pytest.mark.parametrize(("over", "field", "rule"), [
    ({"d": 96}, "d", "head dimension 96 is not served"),
    ({"heads": 6, "kv_heads": 4}, "kv_heads", "must be a multiple of kv_heads"),
    ({"causal": "yes"}, "causal", "true or false"),
    ({"window": 128}, "window", "not a field of a attention problem"),
])
def test_an_impossible_attention_spec_is_refused_naming_the_field(
        client: TestClient, over: dict[str, Any], field: str, rule: str) -> None:
    r = _post(client, {**ISSUE, **over})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "problem", field]
    assert rule in detail["msg"]


def test_tensors_over_the_service_limit_are_refused(client: TestClient) -> None:
    huge = {**ISSUE, "batch": 16, "heads": 64, "kv_heads": 64, "s_q": 1 << 20,
            "s_kv": 1 << 20, "d": 256}
    r = _post(client, huge)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "problem"]
    assert "over max_problem_bytes" in detail["msg"]


def test_backends_of_another_kind_are_refused(client: TestClient) -> None:
    r = _post(client, ISSUE, backends=["cublas"])
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "backends"] and "not a backend of attention" in detail["msg"]
    alone = _post(client, ISSUE, backends=["triton_decode"])
    assert alone.status_code == 422, alone.text
    assert "decode tier is for short queries" in alone.json()["detail"][0]["msg"]


def test_a_bad_query_field_is_refused_naming_it(client: TestClient) -> None:
    r = client.get(QUERY.replace("d=128", "d=96"))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["query", "d"]
    r = client.get(QUERY.replace("causal=true", "causal=maybe"))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["query", "causal"]
