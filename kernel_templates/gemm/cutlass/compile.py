"""Compile rendered CUTLASS operations with nvcc into a content-addressed artifact cache.

One nvcc process per file, up to ``jobs`` files at once (default: one per core), each file
holding up to ``per_file`` operations (the CUTLASS headers cost a good part of a compile, so a
few kernels per file amortise them; one bad kernel in a file is retried alone, so it fails by
itself).

Cache layout under ``root`` (``KS_CUTLASS_CACHE``, default ``~/.cache/kernelsearch/cutlass``)::

    artifacts/<key>/kernels.so       the shared library
    artifacts/<key>/kernels.cu       the source it was built from
    artifacts/<key>/manifest.json    ops (their descriptions), compile seconds, toolchain, host
    index/<toolchain id>/<op name>.json   -> {"key": <key>}: which artifact holds an op
    locks/<key>.lock                 held while one process compiles <key>

``key`` is the sha256 of the operation names, the rendered source, the nvcc version string, the
CUTLASS version, the flags and the arch: a different toolchain never reuses a stale binary, and
an unchanged one never recompiles. Artifacts are written to a temporary directory and renamed
into place (atomic on one filesystem); a per-key lock file stops two workers sharing the cache
from compiling the same key twice (the second waits, then finds the artifact). Nothing in an
artifact names the machine it was built on except ``manifest.json``'s informative ``host``, so a
cache copied to another host with the same toolchain and GPU arch is used as it is.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel_templates import errors
from kernel_templates.gemm.cutlass.enumerate import CutlassOp
from kernel_templates.gemm.cutlass.render import render

__all__ = ["Artifact", "BuildResult", "CompileError", "CutlassCache", "Toolchain", "build",
           "cache_key", "default_cache_dir", "toolchain"]

GENCODE = "-gencode=arch=compute_90a,code=[sm_90a]"
BASE_FLAGS = ("-O1", "-std=c++17", "--expt-relaxed-constexpr", "-DNDEBUG", "-Xcompiler=-fPIC",
              "-shared", "-lcudart")
LIB = "kernels.so"
SOURCE = "kernels.cu"
MANIFEST = "manifest.json"


class CompileError(errors.CompileError):
    """nvcc failed (or is missing); ``stderr_tail`` is the end of its output."""

    def __init__(self, message: str, ops: Sequence[str] = (), stderr_tail: str = "",
                 returncode: int | None = None) -> None:
        detail = f"\n--- nvcc output (tail) ---\n{stderr_tail}" if stderr_tail else ""
        super().__init__(f"{message}{detail}")
        self.ops = tuple(ops)
        self.stderr_tail = stderr_tail
        self.returncode = returncode


def default_cache_dir() -> Path:
    return Path(os.environ.get("KS_CUTLASS_CACHE")
                or Path.home() / ".cache" / "kernelsearch" / "cutlass").expanduser()


def cutlass_include_dirs() -> tuple[Path, Path]:
    """The CUTLASS headers shipped inside the ``nvidia-cutlass`` wheel."""
    import cutlass_library

    root = Path(cutlass_library.__file__).parent / "source"
    inc, util = root / "include", root / "tools" / "util" / "include"
    if not (inc / "cutlass" / "cutlass.h").is_file():
        raise CompileError(f"CUTLASS headers not found under {root} (nvidia-cutlass wheel?)")
    return inc, util


@dataclass(frozen=True)
class Toolchain:
    """What a binary depends on besides its source."""

    nvcc: str  # the full ``nvcc --version`` text
    cutlass: str
    arch: str = "sm_90a"
    flags: tuple[str, ...] = (GENCODE, *BASE_FLAGS)

    @property
    def id(self) -> str:
        text = json.dumps([self.nvcc, self.cutlass, self.arch, list(self.flags)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"nvcc": self.nvcc, "cutlass": self.cutlass, "arch": self.arch,
                "flags": list(self.flags), "id": self.id}


def toolchain(nvcc: str = "nvcc", extra_flags: Sequence[str] = ()) -> Toolchain:
    """The toolchain of this machine (``CompileError`` when nvcc cannot run)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompileError(f"nvcc is not usable ({exc}): CUTLASS kernels cannot be built on this "
                           "machine") from exc
    if out.returncode != 0:
        raise CompileError("nvcc --version failed", stderr_tail=out.stderr[-2000:],
                           returncode=out.returncode)
    try:
        cutlass_version = version("nvidia-cutlass")
    except PackageNotFoundError:
        import cutlass_library

        cutlass_version = getattr(cutlass_library, "__version__", "unknown")
    return Toolchain(nvcc=out.stdout.strip(), cutlass=cutlass_version,
                     flags=(GENCODE, *BASE_FLAGS, *extra_flags))


def cache_key(op_names: Sequence[str], source: str, tc: Toolchain) -> str:
    text = json.dumps({"ops": list(op_names), "source": source, "nvcc": tc.nvcc,
                       "cutlass": tc.cutlass, "flags": list(tc.flags), "arch": tc.arch},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Artifact:
    """A built shared library and what it holds."""

    key: str
    path: Path  # the artifact directory
    ops: tuple[str, ...]
    compile_s: float
    cached: bool  # found in the cache rather than compiled by this call
    op_meta: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False, compare=False)

    @property
    def library(self) -> Path:
        return self.path / LIB


@dataclass
class BuildResult:
    """Per-operation outcome of ``build``: the artifact that holds each op, or its error."""

    artifacts: dict[str, Artifact] = field(default_factory=dict)  # op name -> artifact
    errors: dict[str, CompileError] = field(default_factory=dict)  # op name -> error
    compile_s: float = 0.0  # summed nvcc seconds of what this call compiled
    wall_s: float = 0.0

    @property
    def compiled(self) -> int:
        return len({a.key for a in self.artifacts.values() if not a.cached})


class CutlassCache:
    """The artifact cache in one directory (see the module docstring)."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    def artifact_dir(self, key: str) -> Path:
        return self.root / "artifacts" / key

    def _index_file(self, tc: Toolchain, op_name: str) -> Path:
        return self.root / "index" / tc.id / f"{op_name}.json"

    def read(self, key: str, cached: bool = True) -> Artifact | None:
        d = self.artifact_dir(key)
        try:
            manifest = json.loads((d / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        if not (d / LIB).is_file():
            return None
        ops = tuple(o["name"] for o in manifest["ops"])
        return Artifact(key=key, path=d, ops=ops, compile_s=float(manifest["compile_s"]),
                        cached=cached, op_meta={o["name"]: o for o in manifest["ops"]})

    def find(self, op_name: str, tc: Toolchain) -> Artifact | None:
        """The cached artifact that holds ``op_name`` built by ``tc`` (``None``: not built)."""
        try:
            key = json.loads(self._index_file(tc, op_name).read_text())["key"]
        except (OSError, ValueError, KeyError):
            return None
        return self.read(key)

    def built(self, tc: Toolchain) -> list[str]:
        """The names of the operations this cache holds built by ``tc`` (an index entry whose
        artifact is whole), sorted."""
        index = self.root / "index" / tc.id
        try:
            names = sorted(p.stem for p in index.glob("*.json"))
        except OSError:
            return []
        return [name for name in names if self.find(name, tc) is not None]

    def _write_index(self, artifact: Artifact, tc: Toolchain) -> None:
        for name in artifact.ops:
            _atomic_write(self._index_file(tc, name), json.dumps({"key": artifact.key}))

    def build_file(self, ops: Sequence[CutlassOp], tc: Toolchain, nvcc: str = "nvcc",
                   timeout_s: float = 1800.0) -> Artifact:
        """Compile ``ops`` into one library, or return the cached one (``CompileError``)."""
        source = render(ops)
        names = [o.name for o in ops]
        key = cache_key(names, source, tc)
        hit = self.read(key)
        if hit is not None:
            self._write_index(hit, tc)
            return hit
        lock_dir = self.root / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        with open(lock_dir / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another worker compiling the same key: wait
            hit = self.read(key)
            if hit is not None:
                self._write_index(hit, tc)
                return hit
            artifact = self._compile(key, ops, source, tc, nvcc, timeout_s)
        self._write_index(artifact, tc)
        return artifact

    def _compile(self, key: str, ops: Sequence[CutlassOp], source: str, tc: Toolchain,
                 nvcc: str, timeout_s: float) -> Artifact:
        names = [o.name for o in ops]
        inc, util = cutlass_include_dirs()
        (self.root / "artifacts").mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}.", dir=self.root / "artifacts"))
        try:
            (tmp / SOURCE).write_text(source)
            cmd = [nvcc, *tc.flags, f"-I{inc}", f"-I{util}", str(tmp / SOURCE),
                   "-o", str(tmp / LIB)]
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired as exc:
                raise CompileError(f"nvcc timed out after {timeout_s:.0f} s", names) from exc
            except OSError as exc:
                raise CompileError(f"nvcc could not start ({exc})", names) from exc
            compile_s = time.perf_counter() - t0
            if proc.returncode != 0 or not (tmp / LIB).is_file():
                tail = (proc.stderr or proc.stdout)[-4000:]
                raise CompileError(f"nvcc failed ({proc.returncode}) for {len(names)} op(s): "
                                   f"{', '.join(names)}", names, tail, proc.returncode)
            manifest = {"key": key, "ops": [o.to_dict() for o in ops],
                        "compile_s": round(compile_s, 3), "toolchain": tc.to_dict(),
                        "command": cmd[:len(tc.flags) + 1], "host": socket.gethostname(),
                        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
            final = self.artifact_dir(key)
            try:
                os.rename(tmp, final)
            except OSError:
                if self.read(key) is None:  # not a concurrent twin: a real failure
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        artifact = self.read(key, cached=False)
        assert artifact is not None
        return artifact


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _chunks(ops: Sequence[CutlassOp], jobs: int, per_file: int) -> list[list[CutlassOp]]:
    """Split ``ops`` into files: enough files to keep ``jobs`` cores busy, at most ``per_file``
    operations each."""
    if not ops:
        return []
    n_files = max(min(jobs, len(ops)), -(-len(ops) // per_file))
    size = -(-len(ops) // n_files)
    return [list(ops[i:i + size]) for i in range(0, len(ops), size)]


def build(ops: Sequence[CutlassOp], cache: CutlassCache | None = None, *, jobs: int | None = None,
          per_file: int = 4, nvcc: str = "nvcc", tc: Toolchain | None = None,
          on_done: Callable[[str, Artifact | CompileError], None] | None = None) -> BuildResult:
    """Make every op in ``ops`` available as a library: from the cache where an artifact of this
    toolchain holds it, else compiled (in parallel). Never raises for one bad kernel: its
    ``CompileError`` is in ``result.errors`` (a missing nvcc raises, since nothing can build).
    ``on_done(op_name, artifact_or_error)`` is called as each op becomes ready."""
    cache = cache or CutlassCache()
    tc = tc or toolchain(nvcc)
    jobs = jobs or os.cpu_count() or 1
    result = BuildResult()
    t0 = time.perf_counter()
    todo: list[CutlassOp] = []
    seen: set[str] = set()
    for op in ops:
        if op.name in seen:
            continue
        seen.add(op.name)
        hit = cache.find(op.name, tc)
        if hit is not None:
            result.artifacts[op.name] = hit
            if on_done:
                on_done(op.name, hit)
        else:
            todo.append(op)

    def one_file(group: list[CutlassOp]) -> list[tuple[str, Artifact | CompileError]]:
        try:
            art = cache.build_file(group, tc, nvcc)
            return [(o.name, art) for o in group]
        except CompileError as exc:
            if len(group) == 1:
                return [(group[0].name, exc)]
        # One bad kernel must not take its file-mates down: build each alone.
        out: list[tuple[str, Artifact | CompileError]] = []
        for o in group:
            out.extend(one_file([o]))
        return out

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for outcomes in pool.map(one_file, _chunks(todo, jobs, per_file)):
            for name, value in outcomes:
                if isinstance(value, CompileError):
                    result.errors[name] = value
                else:
                    result.artifacts[name] = value
                if on_done:
                    on_done(name, value)
    result.compile_s = sum({a.key: a.compile_s for a in result.artifacts.values()
                            if not a.cached}.values())
    result.wall_s = time.perf_counter() - t0
    return result
