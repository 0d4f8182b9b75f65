"""Benchmarks run in a long-lived spawned child; a crash or a hang costs the child, not the worker.

``IsolatedRunner`` keeps one child process (``multiprocessing`` *spawn* context, so CUDA and
JIT state belong to the child) and sends it one candidate at a time. The child imports what
the registered kernels need once and is reused across candidates. When the child dies (a
segfault, an exit, a sticky CUDA error after which it exits on purpose) the candidate is
``crashed``; when it does not answer within ``timeout_s`` it is killed and the candidate is
``timeout``. Either way the next ``run`` starts a fresh child.

The ``target`` seam (``"module:function"``, called as ``fn(candidate_dict, options) ->
measurement_dict``) lets tests inject children that hang or die. ``plugins`` name modules that
register more kernels with ``kernel_templates.registry`` when imported (``KS_PLUGINS``): the
child and the compile pool import them before they run any candidate.

Before a batch runs, ``prepare`` readies it as each backend registered (its ``Preparer`` in a
thread of this process, parallel nvcc say; its ``warm_up`` runs in the compile pool), so this
module names no backend. It imports neither torch nor triton itself.
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

from kernel_templates.registry import Prepared, Preparer, preload_modules, preparer, warms_up
from search.types import Candidate, Measurement, Status
from workers.execute import STICKY
from workers.plugins import import_plugins

__all__ = ["IsolatedRunner", "load_target", "prepare"]

log = logging.getLogger("kernelsearch.worker")

DEFAULT_TARGET = "workers.execute:execute"


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
                preload: tuple[str, ...] | None, plugins: tuple[str, ...] = ()) -> None:
    _set_interpret(interpret)
    try:
        import_plugins(plugins)
        for module in preload_modules() if preload is None else preload:
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

    ``options`` go to the target with each candidate (``interpret`` is added). ``plugins``
    (imported first) register more kernels. ``preload`` names modules the child imports next,
    before it reports ready, so their import time stays out of the first candidate's timeout
    (``None``: what the registered kinds declare, ``kernel_templates.registry.preload_modules``).
    """

    def __init__(self, interpret: bool, timeout_s: float = 120.0, target: str = DEFAULT_TARGET,
                 options: dict[str, Any] | None = None,
                 preload: tuple[str, ...] | None = None,
                 start_timeout_s: float = 300.0, plugins: Iterable[str] = ()) -> None:
        self.interpret = interpret
        self.timeout_s = timeout_s
        self.target = target
        self.options = {**(options or {}), "interpret": interpret}
        self.preload = preload
        self.plugins = tuple(plugins)
        self.start_timeout_s = start_timeout_s
        self.spawned = 0  # children started so far (1 + respawns)
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Connection | None = None
        self._pool: Any = None  # compile pool, started on the first prepare() and kept
        # What prepare() readied, per (kind, backend): how a candidate names its unit, and
        # unit -> Prepared (seconds still to charge, or the error its candidates get)
        self._prepared: dict[tuple[str, str], tuple[Preparer, dict[str, Prepared]]] = {}

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
                                 args=(child, self.interpret, self.target, self.preload,
                                       self.plugins))
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

        A candidate whose unit (its CUTLASS op, say) failed in ``prepare`` is ``compile_error``
        without a trip to the child (it would only compile again); the first candidate of a
        unit that ``prepare`` built is charged the unit's seconds in ``compile_s``."""
        prepared = None
        entry = self._prepared.get((candidate.problem.kind, candidate.backend))
        unit = entry[0].unit(candidate) if entry is not None else None
        if entry is not None and unit is not None:
            prepared = entry[1].get(unit)
            if prepared is not None and prepared.error is not None:  # kept: its twins fail too
                return Measurement(status=Status.COMPILE_ERROR, error=prepared.error[-4000:],
                                   compile_s=prepared.compile_s or None,
                                   env={"stage": "prepare"})
            entry[1].pop(unit, None)  # the seconds are charged to the first candidate only
        m = self._run(candidate)
        if prepared is not None and prepared.compile_s > 0:
            m = dataclasses.replace(m, compile_s=(m.compile_s or 0.0) + prepared.compile_s)
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
        """Ready a batch's kernels ahead, in parallel: each backend's registered ``Preparer``
        (CUTLASS: its ops built with parallel nvcc) in a thread of its own while the candidates
        of backends that ``warm_up`` (Triton) run once in the compile pool. Returns how many
        kernels were made ready.

        The pool is started once and kept for the runner's life: spawning processes that
        import torch and create a CUDA context costs seconds, which per batch was a third of
        a 64-trial tuning run on the H100.
        """
        candidates = list(candidates)
        if self.interpret:
            return 0
        groups: dict[tuple[str, str], list[Candidate]] = {}
        for c in candidates:
            groups.setdefault((c.problem.kind, c.backend), []).append(c)
        built: dict[tuple[str, str], dict[str, Prepared]] = {}
        threads = []
        for key, group in groups.items():
            hook = preparer(*key)
            if hook is None:
                continue

            def build(key: tuple[str, str] = key, hook: Preparer = hook,
                      group: list[Candidate] = group) -> None:
                built[key] = hook.build(group)

            thread = threading.Thread(target=build, name=f"prepare-{key[1]}", daemon=True)
            thread.start()
            threads.append((key, hook, thread))
        done: int | None = 0
        todo = _warm_up_dicts(candidates)
        if todo:
            if self._pool is None:
                n = processes or max(1, min(8, (os.cpu_count() or 2) - 2))
                self._pool = self._ctx.Pool(processes=n, maxtasksperchild=64,
                                            initializer=import_plugins,
                                            initargs=(self.plugins,))
            done = _compile_all(self._pool, todo, timeout_s)
            if done is None:  # timed out: the pool is gone, the next batch starts a fresh one
                self._pool = None
        ready = 0
        for key, hook, thread in threads:
            thread.join()
            units = built.get(key, {})
            self._prepared.setdefault(key, (hook, {}))[1].update(units)
            ready += sum(1 for p in units.values() if p.error is None)
        return (done or 0) + ready


# -- compile-cache warming --------------------------------------------------------------------
def _compile_one(candidate: dict[str, Any]) -> bool:
    """Run a candidate once in a pool process so its JIT binaries land in the disk cache."""
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
            timeout_s: float = 600.0, plugins: Iterable[str] = ()) -> int:
    """Warm the JIT's on-disk compile cache for ``candidates`` whose backend registered
    ``warm_up`` (Triton) with ``processes`` spawned processes, so the benchmark child later
    loads binaries instead of compiling one by one.

    Returns how many compiled and ran; failures are left for the real run to classify. A no-op
    for the interpreter (nothing is compiled) and for backends without ``warm_up``.
    """
    todo = _warm_up_dicts(candidates)
    if interpret or not todo:
        return 0
    ctx = mp.get_context("spawn")
    with ctx.Pool(processes=min(processes, len(todo)), maxtasksperchild=16,
                  initializer=import_plugins, initargs=(tuple(plugins),)) as pool:
        return _compile_all(pool, todo, timeout_s) or 0


def _warm_up_dicts(candidates: Iterable[Candidate]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in candidates if warms_up(c.problem.kind, c.backend)]


def _compile_all(pool: Any, todo: list[dict[str, Any]], timeout_s: float) -> int | None:
    """How many of ``todo`` compiled and ran in ``pool``; None (pool terminated) on timeout."""
    result = pool.map_async(_compile_one, todo, chunksize=1)
    try:
        return sum(result.get(timeout=timeout_s))
    except mp.TimeoutError:
        pool.terminate()
        return None
