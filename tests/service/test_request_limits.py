"""What a client sends never makes a 500 or comes back whole: lone surrogates in any string,
oversized bodies (declared or streamed), a 422 that does not echo the request."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi.testclient import TestClient

JOB = {"problem": {"kind": "gemm", "m": 64, "n": 48, "k": 80, "dtype": "fp16"}}


def _raw(text: str) -> bytes:
    """JSON text as a client may send it: ``\\ud800`` escapes stay in the JSON."""
    return text.encode()


def test_lone_surrogates_are_4xx_not_500(client: TestClient) -> None:
    bodies = [
        ('/v1/jobs', '{"problem": {"kind": "gemm", "m": 64, "n": 48, "k": 80}, "gpu": "\\ud800"}'),
        ('/v1/jobs', '{"problem": {"kind": "\\ud800", "m": 64}}'),
        ('/v1/jobs', '{"problem": {"\\ud800": 1, "m": 64, "n": 48, "k": 80}}'),
        ('/v1/workers/register', '{"name": "\\ud800", "device": {"gpu_model": "G", '
                                 '"mode": "cuda", "backends": ["cublas"]}}'),
        ('/v1/problems/1/reopen', '{"gpu": "\\udfff"}'),
    ]
    for path, text in bodies:
        r = client.post(path, content=_raw(text), headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text)
        r.json()  # the answer itself is valid JSON


def test_a_422_names_the_field_without_echoing_the_body(client: TestClient) -> None:
    big = "x" * 100_000
    r = client.post("/v1/jobs", json={**JOB, "seed": big})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "seed"]
    assert big not in r.text and len(r.content) < 2_000


def test_an_oversized_body_is_413_declared_or_streamed(client: TestClient) -> None:
    limit = client.app.state.settings.max_body_bytes
    body = b'{"problem": {"kind": "gemm", "m": 64, "n": 48, "k": 80}, "pad": "' + \
        b"x" * (limit + 10) + b'"}'
    r = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text
    assert "KS_MAX_BODY_BYTES" in r.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit counts what arrives
        for i in range(0, len(body), 1 << 16):
            yield body[i:i + (1 << 16)]

    r = client.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text
    # a body under the limit is served as before
    assert client.post("/v1/jobs", json=JOB).status_code == 201
