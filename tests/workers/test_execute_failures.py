"""What ``execute`` answers for a candidate it cannot even read, and how ``classify`` reads an
out-of-memory error that is no ``torch.cuda.OutOfMemoryError`` (a library's own message)."""

from __future__ import annotations

from search.types import Measurement, Status
from workers.execute import classify, execute


def test_an_unreadable_candidate_is_invalid_with_its_error_and_environment() -> None:
    out = Measurement.from_dict(execute({"backend": "triton", "config": {}},  # no problem
                                        {"interpret": True}))
    assert out.status == Status.INVALID
    assert out.error is not None and "KeyError" in out.error and "problem" in out.error
    assert out.env.get("mode") == "interpreter"


def test_an_out_of_memory_message_is_oom() -> None:
    assert classify(RuntimeError("CUDA error: out of memory")) == Status.OOM
    assert classify(MemoryError("cuBLAS: Out Of Memory allocating workspace")) == Status.OOM
    assert classify(RuntimeError("an illegal value")) == Status.LAUNCH_ERROR
