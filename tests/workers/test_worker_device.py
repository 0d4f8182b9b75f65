"""Device fingerprint and run environment (interpreter mode on a CPU host)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from search.kinds.gemm.cutlass_catalogue import Catalogue
from search.types import INTERPRETER_GPU, Device
from workers.device import catalogues, detect_device, environment, offered_backends


def test_interpreter_device() -> None:
    d = detect_device(interpret=True)
    assert d.gpu_model == INTERPRETER_GPU and d.mode == "interpreter"
    assert d.torch == torch.__version__ and d.triton


def test_environment_keys() -> None:
    env = environment(interpret=True)
    assert {"gpu", "mode", "torch", "triton", "hostname", "driver", "cuda"} <= env.keys()


@pytest.mark.gpu
def test_cuda_device() -> None:
    d = detect_device()
    assert d.mode == "cuda" and d.sm_count > 0 and d.smem_per_block > 48 * 1024
    assert "." in d.cc and d.memory_bytes > 0
    assert "sm_clock_mhz" in environment()


def test_cutlass_is_offered_on_sm90_with_nvcc_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_templates.gemm import cutlass as kc
    from kernel_templates.gemm.cutlass.hosting import cutlass_unavailable

    assert "compute capability 8.0" in cutlass_unavailable("8.0")
    monkeypatch.setattr(kc, "cutlass_available", lambda: "cutlass_library is not installed")
    assert cutlass_unavailable("9.0") == "cutlass_library is not installed"
    monkeypatch.setattr(kc, "cutlass_available", lambda: None)

    def no_nvcc(*_a, **_k):
        raise kc.CompileError("nvcc is not usable (no such file)")

    monkeypatch.setattr(kc, "toolchain", no_nvcc)
    assert "nvcc is not usable" in cutlass_unavailable("9.0")
    monkeypatch.setattr(kc, "toolchain", lambda *_a, **_k: None)
    assert cutlass_unavailable("9.0") is None


def test_interpreter_never_offers_cutlass() -> None:
    assert "cutlass" not in detect_device(interpret=True).backends
    # today's interpreter worker: GEMM's and attention's library and custom backends, nothing
    # declared
    device = detect_device(interpret=True)
    assert device.backends == ("cublas", "repaired", "sdpa_math", "triton", "triton_decode",
                               "triton_repair", "triton_skinny", "triton_streamk")
    assert catalogues(device) == {}


def test_offered_backends_follow_the_registry_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA sm_90 worker with cutlass_library and nvcc offers cuBLAS, CUTLASS and Triton
    and declares the CUTLASS catalogue under ``gemm/cutlass``; on sm_80 it offers no CUTLASS."""
    from kernel_templates.gemm import cutlass as kc

    monkeypatch.setattr(kc, "cutlass_available", lambda: None)
    monkeypatch.setattr(kc, "toolchain", lambda *_a, **_k: None)
    monkeypatch.setattr(kc, "catalogue", lambda: Catalogue((), source="fake"))
    h100 = Device(gpu_model="H100", mode="cuda", cc="9.0")
    attention = ("flex", "sdpa_cudnn", "sdpa_efficient", "sdpa_flash", "sdpa_math",
                 "triton_decode")
    gemm = ("cublas", "cublaslt", "cutlass", "repaired", "triton", "triton_repair",
            "triton_skinny", "triton_streamk")
    assert offered_backends(h100) == tuple(sorted((*gemm, *attention)))
    h100 = dataclasses.replace(h100, backends=offered_backends(h100))
    assert catalogues(h100) == {"gemm/cutlass": Catalogue((), source="fake").encode()}
    a100 = Device(gpu_model="A100", mode="cuda", cc="8.0")
    assert offered_backends(a100) == tuple(sorted((*(b for b in gemm if b != "cutlass"),
                                                    *attention)))
    assert catalogues(dataclasses.replace(a100, backends=offered_backends(a100))) == {}


def test_the_cutlass_catalogue_declares_what_the_artifact_cache_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Built operations of the catalogue only (a stale index entry of another CUTLASS is not
    declared); a cache that cannot be read declares none and the catalogue still goes out."""
    from kernel_templates.gemm import cutlass as kc
    from kernel_templates.gemm.cutlass import hosting
    from search.kinds.gemm.cutlass_catalogue import OpSpec

    op = OpSpec("op", (128, 128, 64), (1, 1, 1), "TmaWarpSpecialized", "TmaWarpSpecialized",
                "default", "bf16", "bf16", None, "bf16", "row", "row", 8, 8, 8, 8)
    monkeypatch.setattr(kc, "catalogue", lambda: Catalogue((op,), source="fake"))
    monkeypatch.setattr(kc, "toolchain", lambda *_a, **_k: "tc")

    class Cache:
        def built(self, tc: str) -> list[str]:
            assert tc == "tc"
            return ["op", "gone_op"]

    monkeypatch.setattr(kc, "CutlassCache", Cache)
    h100 = Device(gpu_model="H100", mode="cuda", cc="9.0")
    assert Catalogue.decode(hosting.catalogue(h100)).built == ("op",)

    def unreadable() -> None:
        raise OSError("permission denied")

    monkeypatch.setattr(kc, "CutlassCache", unreadable)
    body = hosting.catalogue(h100)
    assert "built" not in body and Catalogue.decode(body).ops == (op,)
