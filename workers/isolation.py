"""Benchmarks run in a long-lived spawned child; a crash or a hang costs the child, not the worker.

``IsolatedRunner`` keeps one child process (``multiprocessing`` *spawn* context, so CUDA and
Triton state belong to the child) and sends it one candidate at a time. The child imports torch
and triton once and is reused across candidates. When the child dies (a segfault, an exit, a
sticky CUDA error after which it exits on purpose) the candidate is ``crashed``; when it does not
answer within ``timeout_s`` it is killed and the candidate is ``timeout``. Either way the next
``run`` starts a fresh child.

The ``target`` seam (``"module:function"``, called as ``fn(candidate_dict, options) ->
measurement_dict``) lets tests inject children that hang or die.

This module imports neither torch nor triton: the parent stays light.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import multiprocessing as mp
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection, wait
from typing import Any

from search.types import Candidate, Measurement, Status
from workers.execute import STICKY

__all__ = ["IsolatedRunner", "load_target", "prepare", "prepare_cutlass"]

log = logging.getLogger("kernelsearch.worker")

DEFAULT_TARGET = "workers.execute:execute"
DEFAULT_PRELOAD = ("torch", "triton")


def load_target(spec: str) -> Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]:
    """The function named by ``"package.module:function"``."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"target must look like 'module:function', got {spec!r}")
    return getattr(importlib.import_module(module), name)


def _set_interpret(interpret: bool) -> None:
    # The interpreter is chosen when triton is imported, so this runs first in the child.
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"


def _child_main(conn: Connection, interpret: bool, target: str,
                preload: tuple[str, ...]) -> None:
    _set_interpret(interpret)
    try:
        for module in preload:
            importlib.import_module(module)
        fn = load_target(target)
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("fail", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        candidate, options = msg
        try:
            result = fn(candidate, options)
        except BaseException:  # noqa: BLE001 - state unknown: report, then leave
            conn.send(("error", traceback.format_exc()))
            os._exit(3)
        conn.send(("ok", result))
        if result.get("status") in {s.value for s in STICKY}:
            # The CUDA context is poisoned; exiting without teardown avoids hanging in it.
            conn.close()
            os._exit(0)


class IsolatedRunner:
    """Runs candidates one by one in a reusable spawned child; use as a context manager.

    ``options`` go to the target with each candidate (``interpret`` is added). ``preload`` names
    modules the child imports before it reports ready, so their import time stays out of the
    first candidate's timeout.
    """

    def __init__(self, interpret: bool, timeout_s: float = 120.0, target: str = DEFAULT_TARGET,
                 options: dict[str, Any] | None = None,
                 preload: tuple[str, ...] = DEFAULT_PRELOAD,
                 start_timeout_s: float = 300.0) -> None:
        self.interpret = interpret
        self.timeout_s = timeout_s
        self.target = target
        self.options = {**(options or {}), "interpret": interpret}
        self.preload = preload
        self.start_timeout_s = start_timeout_s
        self.spawned = 0  # children started so far (1 + respawns)
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Connection | None = None
        self._pool: Any = None  # compile pool, started on the first prepare() and kept
        # CUTLASS ops built by prepare(): op name -> (nvcc seconds to charge, error or None)
        self._cutlass: dict[str, tuple[float, str | None]] = {}

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> IsolatedRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the child unless one is alive; raise ``RuntimeError`` if it cannot start."""
        if self._proc is not None and self._proc.is_alive():
            return
        self._reap()
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_child_main, name="kernelsearch-bench", daemon=True,
                                 args=(child, self.interpret, self.target, self.preload))
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.spawned += 1
        ready = wait([parent, proc.sentinel], timeout=self.start_timeout_s)
        msg: tuple[str, Any] | None = None
        if parent in ready:
            try:
                msg = parent.recv()
            except (EOFError, OSError):
                msg = None
        if msg is None or msg[0] != "ready":
            detail = msg[1] if msg else f"no answer (exit code {proc.exitcode})"
            self._reap()
            raise RuntimeError(f"benchmark child failed to start: {detail}")

    def close(self) -> None:
        """Ask the child to leave, then make sure it has; stop the compile pool."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
            except (OSError, ValueError):
                pass
            self._proc.join(timeout=10)
        self._reap()

    def _reap(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=10)
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None

    # -- work ---------------------------------------------------------------------------------
    def run(self, candidate: Candidate) -> Measurement:
        """Measure ``candidate`` in the child; a death is ``crashed``, silence is ``timeout``.

        A CUTLASS candidate whose op failed to compile in ``prepare`` is ``compile_error``
        without a trip to the child (it would only run nvcc again); one that ``prepare`` built
        is charged its share of the nvcc seconds in ``compile_s``."""
        prepared = None
        if candidate.backend == "cutlass":
            op = str(candidate.config.get("op"))
            prepared = self._cutlass.get(op)
            if prepared is not None and prepared[1] is not None:  # kept: its twins fail too
                return Measurement(status=Status.COMPILE_ERROR, error=prepared[1][-4000:],
                                   compile_s=prepared[0] or None, env={"stage": "prepare"})
            self._cutlass.pop(op, None)  # nvcc seconds are charged to the first candidate
        m = self._run(candidate)
        if prepared is not None and prepared[0] > 0:
            m = dataclasses.replace(m, compile_s=(m.compile_s or 0.0) + prepared[0])
        return m

    def _run(self, candidate: Candidate) -> Measurement:
        self.start()
        assert self._conn is not None and self._proc is not None
        proc, conn = self._proc, self._conn
        t0 = time.perf_counter()
        try:
            conn.send((candidate.to_dict(), self.options))
        except (OSError, ValueError) as exc:
            self._reap()
            return Measurement(status=Status.CRASHED, error=f"child unreachable: {exc!r}")
        ready = wait([conn, proc.sentinel], timeout=self.timeout_s)
        if conn in ready:
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                kind, payload = "died", None
            if kind == "ok":
                m = Measurement.from_dict(payload)
                if m.status in STICKY:
                    self._reap()
                return m
            self._reap()
            if kind == "error":
                return Measurement(status=Status.CRASHED, error=f"target raised:\n{payload}")
        elif not ready:
            self._reap()
            return Measurement(status=Status.TIMEOUT,
                               error=f"no answer within {self.timeout_s:g} s; child killed",
                               bench_s=time.perf_counter() - t0)
        proc.join(timeout=10)
        code = proc.exitcode
        self._reap()
        return Measurement(status=Status.CRASHED, error=f"benchmark child died (exit code {code})")

    def prepare(self, candidates: Iterable[Candidate], processes: int | None = None,
                timeout_s: float = 600.0) -> int:
        """Compile a batch's kernels ahead, in parallel: Triton configs in the compile pool
        (see ``prepare``) while the batch's CUTLASS ops build with parallel nvcc processes
        (``prepare_cutlass``) in a thread. Returns how many kernels were made ready.

        The pool is started once and kept for the runner's life: spawning processes that
        import torch and create a CUDA context costs seconds, which per batch was a third of
        a 64-trial tuning run on the H100.
        """
        candidates = list(candidates)
        if self.interpret:
            return 0
        built: dict[str, tuple[float, str | None]] = {}
        cutlass = None
        if any(c.backend == "cutlass" for c in candidates):
            cutlass = threading.Thread(target=lambda: built.update(prepare_cutlass(candidates)),
                                       name="cutlass-build", daemon=True)
            cutlass.start()
        done: int | None = 0
        todo = _triton_dicts(candidates)
        if todo:
            if self._pool is None:
                n = processes or max(1, min(8, (os.cpu_count() or 2) - 2))
                self._pool = self._ctx.Pool(processes=n, maxtasksperchild=64)
            done = _compile_all(self._pool, todo, timeout_s)
            if done is None:  # timed out: the pool is gone, the next batch starts a fresh one
                self._pool = None
        if cutlass is not None:
            cutlass.join()
            self._cutlass.update(built)
        return (done or 0) + sum(1 for _, err in built.values() if err is None)


# -- compile-cache warming --------------------------------------------------------------------
def _compile_one(candidate: dict[str, Any]) -> bool:
    """Run a candidate once in a pool process so its kernels land in Triton's disk cache."""
    try:
        import torch

        from kernel_templates.registry import kernel_kind, make_callable

        cand = Candidate.from_dict(candidate)
        inputs = kernel_kind(cand.problem.kind).make_inputs(cand.problem, "cuda", 0)
        make_callable(cand, inputs)()
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001 - the real run classifies the failure
        return False


def prepare(candidates: Iterable[Candidate], interpret: bool = False, processes: int = 4,
            timeout_s: float = 600.0) -> int:
    """Warm Triton's on-disk compile cache for ``candidates`` with ``processes`` spawned
    processes, so the benchmark child later loads binaries instead of compiling one by one.

    Returns how many compiled and ran; failures are left for the real run to classify. A no-op
    for the interpreter (nothing is compiled) and for non-Triton backends.
    """
    todo = _triton_dicts(candidates)
    if interpret or not todo:
        return 0
    ctx = mp.get_context("spawn")
    with ctx.Pool(processes=min(processes, len(todo)), maxtasksperchild=16) as pool:
        return _compile_all(pool, todo, timeout_s) or 0


def prepare_cutlass(candidates: Iterable[Candidate], jobs: int | None = None
                    ) -> dict[str, tuple[float, str | None]]:
    """Build the CUTLASS ops of ``candidates`` (each unique op once) into the artifact cache
    with parallel nvcc (``kernel_templates.gemm.cutlass.build``), so the benchmark child only loads
    them. Returns op name -> (nvcc seconds to charge to its first candidate: its share of its
    file's compile, 0 when found in the cache; the compile error's text or None). Never raises:
    an op it cannot look up, or a missing toolchain, is left for the child to classify."""
    names = list(dict.fromkeys(str(c.config.get("op")) for c in candidates
                               if c.backend == "cutlass" and c.config.get("op")))
    if not names:
        return {}
    try:
        from kernel_templates.gemm import cutlass as kc

        ops = []
        for name in names:
            try:
                ops.append(kc.op_by_name(name))
            except KeyError:
                continue  # not an op of this CUTLASS version: the child says INVALID
        t0 = time.perf_counter()
        result = kc.build(ops, jobs=jobs)
    except Exception as exc:  # noqa: BLE001 - no nvcc, no cutlass_library: the child reports
        log.warning("building CUTLASS ops ahead failed: %s", exc)
        return {}
    out: dict[str, tuple[float, str | None]] = {}
    for name, art in result.artifacts.items():
        out[name] = (0.0 if art.cached else art.compile_s / max(1, len(art.ops)), None)
    for name, err in result.errors.items():
        out[name] = (0.0, str(err))
    log.info("CUTLASS: %d op(s) ready, %d failed, %d compiled in %.1f s", len(result.artifacts),
             len(result.errors), result.compiled, time.perf_counter() - t0)
    return out


def _triton_dicts(candidates: Iterable[Candidate]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in candidates if c.backend == "triton"]


def _compile_all(pool: Any, todo: list[dict[str, Any]], timeout_s: float) -> int | None:
    """How many of ``todo`` compiled and ran in ``pool``; None (pool terminated) on timeout."""
    result = pool.map_async(_compile_one, todo, chunksize=1)
    try:
        return sum(result.get(timeout=timeout_s))
    except mp.TimeoutError:
        pool.terminate()
        return None
