"""Plug-ins named in the worker settings register kernels in the worker and in its benchmark
child, which imports them before it runs any candidate (no reliance on the environment)."""

from __future__ import annotations

import sys

import pytest

from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Device, Status
from workers.device import catalogues, offered_backends
from workers.isolation import IsolatedRunner
from workers.plugins import import_plugins
from workers.settings import WorkerSettings

try:
    import fake_targets
except ImportError:  # tests collected as packages
    from tests.workers import fake_targets

PLUGIN = fake_targets.__name__.replace("fake_targets", "toy_plugin")
ANY = Candidate(problem=GemmProblem(m=16, n=16, k=16, dtype="fp32"), backend="triton",
                config={})


def test_settings_name_plugins_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KS_PLUGINS", f"{PLUGIN}, json")
    assert WorkerSettings().plugins == (PLUGIN, "json")
    monkeypatch.delenv("KS_PLUGINS")
    assert WorkerSettings().plugins == ()


def test_the_child_imports_the_plugins_before_any_candidate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KS_PLUGINS", raising=False)  # passed explicitly, not inherited
    target = f"{fake_targets.__name__}:registry_state"
    with IsolatedRunner(interpret=True, timeout_s=60.0, target=target, preload=(),
                        plugins=(PLUGIN,)) as r:
        m = r.run(ANY)
    assert m.status == Status.OK, m.error
    assert "toy_double" in m.env["kinds"] and m.env["toy_backends"] == ["torch"]
    assert m.env["modules"] == [PLUGIN]
    with IsolatedRunner(interpret=True, timeout_s=60.0, target=target, preload=()) as r:
        bare = r.run(ANY)
    assert "toy_double" not in bare.env["kinds"] and bare.env["modules"] == []


def test_a_child_that_cannot_import_a_plugin_fails_to_start() -> None:
    with pytest.raises(RuntimeError, match="no_such_plugin"):
        IsolatedRunner(interpret=True, preload=(), plugins=("no_such_plugin",)).start()


def test_a_plugins_backends_are_offered_and_declared(clean_registry: None) -> None:
    import_plugins([PLUGIN])
    sys.modules[PLUGIN].register()  # again, in case an earlier test imported it already
    device = Device(gpu_model="cpu", mode="interpreter")
    assert offered_backends(device) == ("cublas", "repaired", "sdpa_math", "torch", "triton",
                                        "triton_decode", "triton_repair", "triton_skinny",
                                        "triton_streamk")
    declared = catalogues(Device(gpu_model="cpu", mode="interpreter",
                                 backends=offered_backends(device)))
    assert declared == {"toy_double/torch": {"sizes": [1, 2, 4]}}
