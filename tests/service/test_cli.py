"""The command line: the same options on every command, derived from the kinds' specs; bad
input refused before anything starts, naming the option; tables by default, JSON with --json.

Jobs here are driven by the FAKE worker of ``tests/service/conftest.py`` (FAKE measurements
reported over the API); ``tests/e2e/test_cli_served.py`` runs the commands as processes against
``kernelsearch serve`` with a real interpreter worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from search import kinds
from service.cli import app, remote, show
from service.cli.options import JOB_PANEL, OUT_PANEL, PROBLEM_PANEL
from service.client import KernelSearchClient
from service.settings import ServiceSettings

ROOT = Path(__file__).resolve().parents[2]
#: nothing answers here: a command that reached the network would fail on the connection
NOWHERE = ["--url", "http://127.0.0.1:9"]
GEMM = ["--m", "64", "--n", "48", "--k", "80", "--dtype", "fp16"]
ATTENTION = ["--kind", "attention", "--batch", "1", "--heads", "2", "--kv-heads", "1",
             "--s-q", "32", "--s-kv", "48", "--d", "16", "--causal", "--dtype", "fp16"]


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def flags(command: str, panel: str | None = None) -> set[str]:
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {opt for p in cmd.params if panel is None or getattr(p, "rich_help_panel", None)
            == panel for opt in p.opts}


# -- the same options everywhere ------------------------------------------------------------------
def test_commands_are_listed() -> None:
    result = run("--help")
    assert result.exit_code == 0
    for command in ("tune", "serve", "worker", "submit", "status", "best", "jobs", "cancel"):
        assert command in result.output


def test_tune_submit_and_best_take_the_same_problem_options_from_the_kinds_specs() -> None:
    import dataclasses

    expected = {"--kind"}
    for kind in kinds.kinds().values():
        expected |= {"--" + f.name.replace("_", "-")
                     for f in dataclasses.fields(kind.problem_type) if f.init}
    assert {"--m", "--heads", "--s-kv", "--causal", "--kv-heads"} <= expected
    for command in ("tune", "submit", "best"):
        assert flags(command, PROBLEM_PANEL) == expected, command
    # no positional problem arguments any more: `best 64 48 80` is refused
    assert run("best", "64", "48", "80").exit_code == 2


def test_tune_and_submit_take_the_same_job_options_and_all_data_commands_json() -> None:
    job = {"--trials", "--seconds", "--backends", "--mode", "--threshold", "--allow-tf32",
           "--policy", "--allow"}
    assert job <= flags("tune", JOB_PANEL) and job <= flags("submit", JOB_PANEL)
    assert flags("tune", JOB_PANEL) == job and flags("submit", JOB_PANEL) == job | {"--gpu"}
    for command in ("tune", "submit", "status", "best", "jobs", "cancel"):
        assert "--json" in flags(command, OUT_PANEL), command
    for command in ("submit", "status", "best", "jobs", "cancel"):
        assert "--url" in flags(command, OUT_PANEL), command


def test_every_command_has_help() -> None:
    for command in ("tune", "serve", "worker", "submit", "status", "best", "jobs", "cancel"):
        result = run(command, "--help")
        assert result.exit_code == 0 and "Usage" in result.output, command


def test_a_plug_in_kinds_fields_become_options() -> None:
    """KS_PLUGINS names tests/plugins/axpy.py: its ``alpha`` is an option of every problem
    command, and its problems are checked by its own rules, in a fresh process."""
    env = {**os.environ, "KS_PLUGINS": "tests.plugins.axpy", "COLUMNS": "200"}
    cli = [sys.executable, "-m", "service.cli"]
    helped = subprocess.run([*cli, "best", "--help"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert helped.returncode == 0, helped.stderr
    assert "--alpha" in helped.stdout and "axpy" in helped.stdout
    bad = subprocess.run([*cli, "best", "--kind", "axpy", "--n", "0", *NOWHERE], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--n" in bad.stderr and "1..2^30" in bad.stderr
    wrong = subprocess.run([*cli, "tune", "--kind", "axpy", "--n", "8", "--heads", "2"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2
    assert "--heads" in wrong.stderr and "not an option of an axpy problem" in wrong.stderr


def test_the_service_commands_import_no_gpu_stack() -> None:
    """``submit``, ``status``, ``best`` and ``jobs`` run on a laptop without torch."""
    code = ("import sys\n"
            "from typer.testing import CliRunner\n"
            "from service.cli import app\n"
            "for args in (['best', '--m', '8', '--n', '8', '--k', '8'], ['status', '1'],\n"
            "             ['submit', '--kind', 'attention', '--batch', '1', '--heads', '2',\n"
            "              '--s-q', '8', '--s-kv', '8', '--d', '16'], ['jobs']):\n"
            "    r = CliRunner().invoke(app, [*args, '--url', 'http://127.0.0.1:9'])\n"
            "    assert r.exit_code == 2 and 'cannot reach' in r.output, r.output\n"
            "print(sorted(m for m in ('torch', 'triton', 'kernel_templates', 'workers.device')\n"
            "             if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- bad input, named -----------------------------------------------------------------------------
BAD = [
    (["--m", "0", "--n", "4", "--k", "4"], "--m", "positive integer"),
    (["--m", "64"], "--n, --k", "a gemm problem needs them"),
    (["--kind", "attention", "--batch", "1"], "--heads", "an attention problem needs them"),
    ([*ATTENTION, "--m", "64"], "--m", "not an option of an attention problem"),
    (["--kind", "conv", *GEMM], "--kind", "conv"),
    ([*GEMM, "--dtype", "fp8_e4m3", "--layout-b", "row"], "--layout-b", "column-major"),
    (["--m", "64", "--n", "48", "--k", "100", "--dtype", "fp8_e4m3"], "--k", "multiple of 16"),
    ([*ATTENTION, "--d", "96"], "--d", "head dimension 96"),
    ([*ATTENTION, "--heads", "6", "--kv-heads", "4"], "--kv-heads", "multiple of"),
]
JOB_BAD = [
    ([*GEMM, "--backends", "cublas,foo"], "--backends", "unknown backend 'foo'"),
    ([*ATTENTION, "--s-q", "64", "--backends", "triton_decode"], "--backends", "short queries"),
    ([*GEMM, "--dtype", "fp8_e4m3", "--k", "96", "--backends", "foo"], "--backends",
     "unknown backend 'foo'"),
    ([*GEMM, "--allow", "fp4=0.1"], "--allow", "unknown precision"),
    ([*GEMM, "--allow", "fp8_e4m3=-1"], "--allow", "greater than 0"),
    ([*GEMM, "--allow", "fp8_e4m3=0.9"], "--allow", "less than or equal to 0.5"),
    ([*GEMM, "--allow", "fp8_e4m3"], "--allow", "PRECISION=BOUND"),
    # one word each: rich wraps the message in a box of the terminal's width
    ([*GEMM, "--dtype", "fp32", "--allow", "fp8_e4m3=0.05"], "--allow", "quantised"),
    ([*GEMM, "--allow", "fp8_e4m3=0.05", "--backends", "cublas"], "--allow", "triton"),
    ([*ATTENTION, "--allow", "fp8_e4m3=0.05"], "--allow", "attention"),
    ([*GEMM, "--policy", "patience=0"], "--policy", "patience"),
    ([*GEMM, "--policy", "nonsense=1"], "--policy", "nonsense"),
    ([*GEMM, "--policy", "patience"], "--policy", "KEY=VALUE"),
    ([*GEMM, "--mode", "force", "--policy", "force_custom=false"], "--policy", "--mode force"),
    ([*GEMM, "--seconds", "0"], "--seconds", "greater than 0"),
    ([*GEMM, "--threshold", "1.5"], "--threshold", "less than or equal to 1"),
    ([*GEMM, "--trials", "0"], "--trials", "greater than or equal to 1"),
    ([*GEMM, "--mode", "eager"], "--mode", "eager"),
]


@pytest.mark.parametrize("command", ["tune", "submit", "best"])
@pytest.mark.parametrize(("args", "option", "rule"), BAD)
def test_a_bad_problem_is_refused_naming_the_option(command: str, args: list[str], option: str,
                                                    rule: str) -> None:
    result = run(command, *args, *([] if command == "tune" else NOWHERE))
    assert result.exit_code == 2, result.output
    assert option in result.output and rule in result.output, result.output
    assert "cannot reach" not in result.output  # refused here, before any request


@pytest.mark.parametrize("command", ["tune", "submit"])
@pytest.mark.parametrize(("args", "option", "rule"), JOB_BAD)
def test_a_bad_job_option_is_refused_naming_it(command: str, args: list[str], option: str,
                                               rule: str) -> None:
    result = run(command, *args, *([] if command == "tune" else NOWHERE))
    assert result.exit_code == 2, result.output
    assert option in result.output and rule in result.output, result.output
    assert "cannot reach" not in result.output


def test_an_unreachable_service_is_one_line_with_a_hint() -> None:
    result = run("status", "1", "--url", "http://127.0.0.1:9")
    assert result.exit_code == 2
    assert "cannot reach http://127.0.0.1:9" in result.stderr
    assert "kernelsearch serve" in result.stderr and "Traceback" not in result.output


# -- against a service, FAKE measurements ------------------------------------------------------
@pytest.fixture
def settings(tmp_path: Path) -> ServiceSettings:
    return ServiceSettings(database_url=f"sqlite:///{tmp_path / 'ks.db'}", lease_seconds=60,
                           window=4, max_attempts=3, default_max_trials=8)


@pytest.fixture
def cli(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The CLI talking to the test app (and printing wide, so rows do not wrap)."""
    monkeypatch.setattr(remote, "client", lambda url, token=None: KernelSearchClient(
        "http://testserver", http_client=client, retries=0))
    monkeypatch.setattr(show.out, "width", 220)
    return run


def _submitted(cli: Any, *args: str) -> dict[str, Any]:
    result = cli("submit", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_submit_status_best_and_jobs_print_tables_or_json(cli: Any, driver: Any) -> None:
    job = _submitted(cli, "--m", "512", "--n", "512", "--k", "512", "--dtype", "fp16",
                     "--trials", "4", "--policy", "patience=2")
    assert job["status"] == "queued" and job["policy"]["patience"] == 2
    assert job["backends"] == ["cublas", "cublaslt", "repaired", "triton", "triton_repair",
                               "triton_streamk", "triton_skinny"]  # the library search left out
    driver.run_all(driver.register())
    served = driver.job(job["id"])
    assert served["status"] == "done" and served["decision"] is not None

    as_json = cli("status", str(job["id"]), "--json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == served
    table = cli("status", str(job["id"]))
    assert table.exit_code == 0 and not table.stdout.lstrip().startswith("{")
    assert "512x512x512 fp16" in table.stdout and "of roofline" in table.stdout
    assert f"verdict: {served['decision']['verdict']}" in table.stdout
    share = served["decision"]["efficiency_library"]
    assert f"{share:.0%}" in table.stdout  # the library's share, as the decision computed it
    assert "torch CPU" not in table.stdout and "on the CPU" not in table.stdout

    problem = ["--m", "512", "--n", "512", "--k", "512", "--dtype", "fp16"]
    best = cli("best", *problem, "--json")
    assert best.exit_code == 0
    found = json.loads(best.stdout)
    assert found["backend"] == served["best"]["backend"]
    assert found["median_us"] == pytest.approx(served["best"]["median_us"])
    best_table = cli("best", *problem)
    assert best_table.exit_code == 0 and f"{found['problem_key']} on {driver.GPU}" \
        in best_table.stdout
    assert "verdict:" in best_table.stdout

    listed = cli("jobs", "--json")
    assert [j["id"] for j in json.loads(listed.stdout)["items"]] == [job["id"]]
    assert "512x512x512 fp16" in cli("jobs").stdout


def test_never_tuned_is_exit_status_1_with_a_message(cli: Any) -> None:
    result = cli("best", *GEMM)
    assert result.exit_code == 1 and "never tuned" in result.stderr and not result.stdout


def test_attention_submit_status_and_best(cli: Any, driver: Any) -> None:
    job = _submitted(cli, *ATTENTION, "--trials", "2")
    assert job["problem"]["kind"] == "attention" and job["problem"]["kv_heads"] == 1
    assert "triton_decode" in job["backends"]
    driver.run_all(driver.register(backends=["sdpa_cudnn", "sdpa_math", "triton"]))
    served = driver.job(job["id"])
    assert served["status"] == "done", served
    status = cli("status", str(job["id"]))
    assert "b1 h2/kv1 s32x48 d16 causal fp16" in status.stdout
    found = json.loads(cli("best", *ATTENTION, "--json").stdout)
    assert found["problem_key"] == served["problem_key"]
    assert found["backend"] == served["best"]["backend"]
    table = cli("best", *ATTENTION)
    assert table.exit_code == 0 and found["backend"] in table.stdout
    # a problem of another shape was never tuned
    assert cli("best", *ATTENTION, "--s-kv", "64").exit_code == 1


def test_allow_submits_the_policy_and_best_exact_asks_for_the_input_precision(
        cli: Any, driver: Any, fake_tuners: Any) -> None:
    from search.kinds.gemm.spec import GemmProblem
    from tests.conftest import FakeTuner

    problem = ["--m", "512", "--n", "512", "--k", "512", "--dtype", "fp16"]
    # the fp8 tier's FAKE configurations are lowered ones, as fp8_space makes them
    lowered = {"PRECISION": "fp8_e4m3", "SCALES": "row", "BLOCK_M": 64, "BLOCK_N": 64,
               "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    fake_tuners.tiers[(GemmProblem(m=512, n=512, k=512, dtype="fp16").key(), driver.GPU,
                       "fp8")] = FakeTuner([{**lowered, "num_stages": s} for s in (2, 3, 4)])
    job = _submitted(cli, *problem, "--trials", "6", "--mode", "force",
                     "--allow", "fp8_e4m3=0.05")
    assert job["policy"]["allow"] == {"fp8_e4m3": {"max_rel_error": 0.05}}
    # FAKE: the lowered kernels are the fastest and err as e4m3 does
    driver.run_all(driver.register(), median_of=lambda c: 30.0 if "PRECISION" in c["config"]
                   else 100.0 if c["backend"] == "cublas" else 120.0)
    served = driver.job(job["id"])
    d = served["decision"]
    assert d["precision"] == "fp8_e4m3" and d["backend"] == "triton"
    status = cli("status", str(job["id"])).stdout
    assert "computing in fp8_e4m3" in status and "fp8_e4m3" in status
    found = json.loads(cli("best", *problem, "--json").stdout)
    assert found["precision"] == "fp8_e4m3"
    exact = json.loads(cli("best", *problem, "--exact", "--json").stdout)
    assert exact["precision"] == "fp16" and "PRECISION" not in exact["config"]
    table = cli("best", *problem, "--exact").stdout
    assert "fp16" in table and "precision" in table


def test_a_cpu_job_is_labelled_for_what_ran_it(cli: Any, driver: Any) -> None:
    """A worker on the interpreter device (FAKE measurements): the library row is torch's CPU
    matmul, not cuBLAS; the rates keep their digits; there is no roofline, and it says so."""
    job = _submitted(cli, *GEMM, "--trials", "2")
    driver.run_all(driver.register(gpu="cpu-interpreter", mode="interpreter"))
    served = driver.job(job["id"])
    assert served["status"] == "done" and served["gpu"] == "cpu-interpreter"
    out = cli("status", str(job["id"])).stdout
    assert "torch CPU matmul (cublas)" in out and "Triton interpreter (triton)" in out
    assert "no roofline" in out and "on the CPU" in out
    assert "no roofline (cpu-interpreter is the CPU" in served["decision"]["rationale"]
    assert "torch CPU matmul takes" in served["decision"]["rationale"]
    lib = served["library_best"]
    assert lib["tflops"] < 0.05  # a 64x48x80 GEMM in 100 us (FAKE): 0.0049 TFLOP/s
    row = next(line for line in out.splitlines() if "library best" in line)
    assert show.rate(lib["tflops"]) in row and show.rate(lib["tflops"]) == "0.00492"
    assert " 0.0 " not in row


@pytest.mark.slow
def test_tune_fp8_on_the_cpu_searches_the_fp8_tier(tmp_path: Path) -> None:
    import torch

    one, z = torch.ones(()), torch.zeros(16, 16).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(z, z.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        pytest.skip("this torch has no CPU torch._scaled_mm")
    out = tmp_path / "result.json"
    # no --layout-b: fp8 defaults to a column-major B
    result = run("tune", "--m", "64", "--n", "48", "--k", "96", "--dtype", "fp8_e4m3",
                 "--trials", "2", "--db", f"sqlite:///{tmp_path / 'ks.db'}", "--interpret",
                 "--mode", "force", "--json", "--out", str(out))
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == json.loads(out.read_text())
    job = printed["job"]
    assert job["problem_key"] == "gemm:b1:m64:n48:k96:fp8_e4m3:bf16:fp32:rc"
    # Which wins on a CPU is a timing, not a property: torch's CPU fp8 matmul slows several-fold
    # while other processes hold the cores. The served kernel is the one the decision chose.
    chosen = job["decision"]["chosen"]
    assert chosen in ("library", "custom")
    assert job["best"]["backend"] == ("cublas" if chosen == "library" else "triton")
    assert "torch CPU matmul takes" in job["decision"]["rationale"]
    assert job["custom_best"]["backend"] == "triton"  # the fp8 template ran correctly
    fp8 = next(t for t in job["decision"]["tiers"] if t["tier"] == "fp8")
    assert fp8["trials"] == 2 and fp8["best_us"] is not None
    assert job["decision"]["precision"] == "fp8_e4m3"  # an fp8 problem's input precision


def test_the_token_comes_from_the_option_or_ks_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KS_TOKEN", "from-the-environment")
    assert remote.client(None)._headers == {"Authorization": "Bearer from-the-environment"}
    assert remote.client(None, "from-the-option")._headers == {
        "Authorization": "Bearer from-the-option"}
    result = CliRunner().invoke(app, ["cancel", "--help"])
    assert "--token" in result.output
