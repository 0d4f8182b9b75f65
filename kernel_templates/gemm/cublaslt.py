"""cuBLASLt through ctypes: the library's ranked algorithms for one GEMM, and a launch of any.

``torch.matmul`` runs the algorithm cuBLAS's heuristic ranks first.
``cublasLtMatmulAlgoGetHeuristic`` ranks several, and an algorithm's configuration (split-K,
the reduction of the splits, CTA swizzling) can be changed and checked
(``cublasLtMatmulAlgoCheck``) before it runs. Where the heuristic's model of a shape is off
(too few tiles for the SMs, a long K), a later or re-split algorithm can be faster: the library
side searches them as it searches CUTLASS configurations.

A row-major ``C = A @ B`` is computed as the column-major ``C^T = B^T A^T``, as torch does, so
no operand is copied: B's storage is cuBLASLt's first operand and A's the second, each
transposed or not by its own layout. The library is the one torch loaded (found by its path in
``/proc/self/maps``), so both share one cuBLAS.

Configurations (``LtConfig``) are plain integers, as ``cublasLtMatmulAlgoConfigSetAttribute``
takes them; ``describe`` turns one into words. A ``cublaslt`` candidate's configuration names an
algorithm by its place in the heuristic's ranking for the problem (``{"rank": 2}``), optionally
re-split along K (``{"rank": 0, "split_k": 1}``) or with another thread-block cluster shape or
custom option (``{"rank": 0, "cluster": "1x1", "custom": 1}``), since the heuristic's own pick
of those two is sometimes far off (docs/benchmarks/cublaslt_space_h100_2026-11-27.md). The
service, which cannot ask cuBLASLt, plans them, and a worker resolves them (:func:`resolve`)
against the cuBLAS it runs, whose version the measurement's environment records.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from dataclasses import asdict, dataclass, replace

import torch

from kernel_templates.configs import check_keys
from kernel_templates.errors import InvalidConfig, LaunchError, Unsupported
from kernel_templates.gemm.cublaslt_tiles import tile_shape

__all__ = ["CLUSTERS", "MAX_RANK", "MAX_SPLIT_K", "LtConfig", "LtGemm", "check_config",
           "describe", "library_version", "overrides", "resolve"]

_OP_N, _OP_T = 0, 1
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32 = 68, 77
_R_32F, _R_16F, _R_16BF = 0, 2, 14
_DTYPES = {torch.bfloat16: _R_16BF, torch.float16: _R_16F, torch.float32: _R_32F}

# cublasLtMatmulDescAttributes_t, cublasLtMatrixLayoutAttribute_t, preference attributes
_DESC_TRANSA, _DESC_TRANSB = 3, 4
_LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_STRIDE = 5, 6
_PREF_MAX_WORKSPACE = 1
# cublasLtMatmulAlgoCapAttributes_t
_CAP_SPLITK, _CAP_REDUCTION_MASK, _CAP_SWIZZLING = 0, 1, 2
_CAP_TILE_IDS, _CAP_CUSTOM_MAX, _CAP_STAGES_IDS = 6, 7, 13
# cublasLtMatmulAlgoConfigAttributes_t: (attribute, ctype) in LtConfig's field order
_CONFIG_ATTRS = (
    ("algo_id", 0, ctypes.c_int32),
    ("tile", 1, ctypes.c_uint32),
    ("split_k", 2, ctypes.c_int32),
    ("reduction", 3, ctypes.c_uint32),
    ("swizzle", 4, ctypes.c_uint32),
    ("custom", 5, ctypes.c_uint32),
    ("stages", 6, ctypes.c_uint32),
    ("inner", 7, ctypes.c_uint16),
    ("cluster", 8, ctypes.c_uint16),
)
#: Workspace a launch may use (cuBLAS's own default on Hopper is 32 MiB).
WORKSPACE_BYTES = 32 << 20
#: How many of the heuristic's algorithms a configuration may name (``rank`` below this).
MAX_RANK = 16
#: The largest K split a configuration may ask for.
MAX_SPLIT_K = 64
#: Thread-block cluster shapes a configuration may set (``cublasLtClusterShape_t`` ids).
CLUSTERS = {"auto": 0, "1x1": 2, "2x1": 3, "4x1": 4, "1x2": 5, "2x2": 6, "1x4": 8}
_CLUSTER_NAMES = {v: k for k, v in CLUSTERS.items()}


class _Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", _Algo), ("workspace", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


@dataclass(frozen=True)
class LtConfig:
    """One cuBLASLt algorithm configuration: the values of its config attributes.

    ``tile``, ``stages``, ``inner`` and ``cluster`` are cuBLASLt's enum ids
    (``cublasLtMatmulTile_t`` ...); ``reduction`` is ``cublasLtReductionScheme_t``
    (0 none, 1 in place, 2 in the compute type, 4 in the output type).
    """

    algo_id: int
    tile: int = 0
    split_k: int = 1
    reduction: int = 0
    swizzle: int = 0
    custom: int = 0
    stages: int = 0
    inner: int = 0
    cluster: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def describe(config: LtConfig) -> str:
    """A short label: ``algo 66, tile 400 (128x80), stages 21, cluster 1x1, custom option 1,
    split-K 2 (reduce in fp32)`` (a tile's shape in cuBLASLt's rows x columns, so ``n`` x
    ``m`` of the problem; a cluster by its name in :data:`CLUSTERS` where it has one)."""
    shape = tile_shape(config.tile)
    words = [f"algo {config.algo_id}",
             f"tile {config.tile}" + (f" ({shape[0]}x{shape[1]})" if shape else ""),
             f"stages {config.stages}"]
    if config.cluster:
        words.append(f"cluster {_CLUSTER_NAMES.get(config.cluster, config.cluster)}")
    if config.custom:
        words.append(f"custom option {config.custom}")
    if config.split_k > 1:
        scheme = {1: "in place", 2: "in fp32", 4: "in the output type"}.get(config.reduction,
                                                                            "auto")
        words.append(f"split-K {config.split_k} (reduce {scheme})")
    if config.swizzle:
        words.append("swizzled")
    return ", ".join(words)


def _check(status: int, what: str) -> None:
    if status != 0:
        raise LaunchError(f"{what} returned cuBLAS status {status}")


@functools.cache
def _lib() -> ctypes.CDLL:
    """torch's libcublasLt, loaded by a first cuBLAS call, with the signatures used here."""
    if not torch.cuda.is_available():
        raise Unsupported("cuBLASLt needs a CUDA device")
    torch.cuda.current_blas_handle()  # makes torch load libcublas and libcublasLt
    path = "libcublasLt.so.13"
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libcublasLt.so" in line:
                path = line.split()[-1]
                break
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise Unsupported(f"cannot load cuBLASLt ({path}): {exc}") from None
    vp, sz, i32, u64, i64 = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64,
                             ctypes.c_int64)
    algo_p, heur_p = ctypes.POINTER(_Algo), ctypes.POINTER(_Heuristic)
    sigs = {
        "cublasLtCreate": [ctypes.POINTER(vp)],
        "cublasLtMatmulDescCreate": [ctypes.POINTER(vp), i32, i32],
        "cublasLtMatmulDescSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatrixLayoutCreate": [ctypes.POINTER(vp), i32, u64, u64, i64],
        "cublasLtMatrixLayoutSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(vp)],
        "cublasLtMatmulPreferenceSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, i32, heur_p,
                                           ctypes.POINTER(i32)],
        "cublasLtMatmulAlgoGetIds": [vp, i32, i32, i32, i32, i32, i32, i32,
                                     ctypes.POINTER(i32), ctypes.POINTER(i32)],
        "cublasLtMatmulAlgoInit": [vp, i32, i32, i32, i32, i32, i32, i32, algo_p],
        "cublasLtMatmulAlgoCheck": [vp, vp, vp, vp, vp, vp, algo_p, heur_p],
        "cublasLtMatmulAlgoCapGetAttribute": [algo_p, i32, vp, sz, ctypes.POINTER(sz)],
        "cublasLtMatmulAlgoConfigSetAttribute": [algo_p, i32, vp, sz],
        "cublasLtMatmulAlgoConfigGetAttribute": [algo_p, i32, vp, sz, ctypes.POINTER(sz)],
        "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, algo_p, vp, sz, vp],
        **{destroy: [vp] for destroy in _DESTROY.values()},
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    lib.cublasLtGetVersion.restype = ctypes.c_size_t
    return lib


def library_version() -> int:
    """cuBLASLt's version number (e.g. 130002), which a stored configuration belongs to."""
    return int(_lib().cublasLtGetVersion())


#: Each descriptor's destructor, by the function that created it.
_DESTROY = {"cublasLtMatmulDescCreate": "cublasLtMatmulDescDestroy",
            "cublasLtMatrixLayoutCreate": "cublasLtMatrixLayoutDestroy",
            "cublasLtMatmulPreferenceCreate": "cublasLtMatmulPreferenceDestroy"}


def _destroy(lib: ctypes.CDLL, owned: list[tuple[str, ctypes.c_void_p]]) -> None:
    """Free an ``LtGemm``'s descriptors (its finalizer: holds no reference to it)."""
    while owned:
        create, handle = owned.pop()
        getattr(lib, _DESTROY[create])(handle)


_HANDLES: dict[int, ctypes.c_void_p] = {}
_WORKSPACES: dict[int, torch.Tensor] = {}
_LOCK = threading.Lock()


def _handle_and_workspace(device: torch.device) -> tuple[ctypes.c_void_p, torch.Tensor]:
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _LOCK:
        if index not in _HANDLES:
            handle = ctypes.c_void_p()
            _check(_lib().cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
            _HANDLES[index] = handle
            _WORKSPACES[index] = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8,
                                             device=torch.device("cuda", index))
        return _HANDLES[index], _WORKSPACES[index]


def _operand_layout(t: torch.Tensor, rows: int, cols: int) -> tuple[int, int, int, int]:
    """``(op, stored rows, stored cols, ld)`` of a row-major ``rows x cols`` operand ``t`` seen
    column-major (its transpose, op N) or a column-major one (op T)."""
    rs, cs = t.stride(-2), t.stride(-1)
    if cs == 1 and rs >= max(cols, 1):  # row-major: column-major cols x rows, op N
        return _OP_N, cols, rows, rs
    if rs == 1 and cs >= max(rows, 1):  # column-major: stored rows x cols, op T
        return _OP_T, rows, cols, cs
    raise Unsupported(f"cuBLASLt needs row- or column-major operands, got strides {t.stride()}")


class LtGemm:
    """``out = a @ b`` through cuBLASLt, for one set of tensors: descriptors built once, then
    ``heuristics`` (the ranked algorithms), ``variants`` (re-split and swizzled versions of an
    algorithm, each checked) and ``launch`` (run a configuration on the current stream).

    ``a`` is ``[batch,] m x k``, ``b`` ``[batch,] k x n`` (each row- or column-major), ``out``
    ``[batch,] m x n`` row-major, all of one dtype (bf16, fp16 or fp32; fp32 as tf32 when
    ``tf32``).
    """

    def __init__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                 tf32: bool = False) -> None:
        if a.dtype not in _DTYPES or b.dtype != a.dtype or out.dtype != a.dtype:
            raise Unsupported(f"cuBLASLt here serves {sorted(map(str, _DTYPES))} operands of one "
                              f"dtype, got {a.dtype} x {b.dtype} -> {out.dtype}")
        if not (a.is_cuda and b.is_cuda and out.is_cuda):
            raise Unsupported("cuBLASLt needs CUDA tensors")
        if out.stride(-1) != 1:
            raise Unsupported("cuBLASLt here writes a row-major output")
        lib = _lib()
        self._lib = lib
        self._handle, self._workspace = _handle_and_workspace(out.device)
        m, k = a.shape[-2:]
        n = b.shape[-1]
        batch = out.shape[0] if out.dim() == 3 else 1
        dt = _DTYPES[a.dtype]
        compute = _COMPUTE_32F_FAST_TF32 if tf32 and a.dtype == torch.float32 else _COMPUTE_32F
        # descriptors are freed once this object is: a launcher's call keeps it alive
        self._owned: list[tuple[str, ctypes.c_void_p]] = []
        self.finalizer = weakref.finalize(self, _destroy, lib, self._owned)
        self.desc = self._new(lib.cublasLtMatmulDescCreate, compute, _R_32F)
        # C^T = B^T A^T: cuBLASLt's A is b (n x k after its op), its B is a (k x m after its op)
        op_b, rows_b, cols_b, ld_b = _operand_layout(b, k, n)
        op_a, rows_a, cols_a, ld_a = _operand_layout(a, m, k)
        self._set(lib.cublasLtMatmulDescSetAttribute, self.desc, _DESC_TRANSA,
                  ctypes.c_int32(op_b))
        self._set(lib.cublasLtMatmulDescSetAttribute, self.desc, _DESC_TRANSB,
                  ctypes.c_int32(op_a))
        self.lt_a = self._layout(dt, rows_b, cols_b, ld_b, batch, b)
        self.lt_b = self._layout(dt, rows_a, cols_a, ld_a, batch, a)
        self.lt_c = self._layout(dt, n, m, out.stride(-2), batch, out)
        self.pref = self._new(lib.cublasLtMatmulPreferenceCreate)
        self._set(lib.cublasLtMatmulPreferenceSetAttribute, self.pref, _PREF_MAX_WORKSPACE,
                  ctypes.c_uint64(WORKSPACE_BYTES))
        self._types = (compute, _R_32F, dt, dt, dt, dt)
        self._ptrs = (ctypes.c_void_p(b.data_ptr()), ctypes.c_void_p(a.data_ptr()),
                      ctypes.c_void_p(out.data_ptr()))
        self._tensors = (a, b, out)
        self._alpha, self._beta = ctypes.c_float(1.0), ctypes.c_float(0.0)

    # -- descriptors ------------------------------------------------------------------------
    def _new(self, create, *args) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        _check(create(ctypes.byref(handle), *args), create.__name__)
        self._owned.append((create.__name__, handle))
        return handle

    @staticmethod
    def _set(setter, obj, attr: int, value) -> None:
        _check(setter(obj, attr, ctypes.byref(value), ctypes.sizeof(value)),
               f"{setter.__name__}({attr})")

    def _layout(self, dt: int, rows: int, cols: int, ld: int, batch: int,
                t: torch.Tensor) -> ctypes.c_void_p:
        layout = self._new(self._lib.cublasLtMatrixLayoutCreate, dt, rows, cols, ld)
        if batch > 1:
            stride = t.stride(0) if t.dim() == 3 else 0
            self._set(self._lib.cublasLtMatrixLayoutSetAttribute, layout, _LAYOUT_BATCH_COUNT,
                      ctypes.c_int32(batch))
            self._set(self._lib.cublasLtMatrixLayoutSetAttribute, layout, _LAYOUT_BATCH_STRIDE,
                      ctypes.c_int64(stride))
        return layout

    # -- algorithms -------------------------------------------------------------------------
    def _config_of(self, algo: _Algo) -> LtConfig:
        values = {}
        for name, attr, ctype in _CONFIG_ATTRS:
            v, written = ctype(), ctypes.c_size_t()
            _check(self._lib.cublasLtMatmulAlgoConfigGetAttribute(
                ctypes.byref(algo), attr, ctypes.byref(v), ctypes.sizeof(v),
                ctypes.byref(written)), f"cublasLtMatmulAlgoConfigGetAttribute({name})")
            values[name] = int(v.value)
        return LtConfig(**values)

    def _algo_of(self, config: LtConfig) -> _Algo:
        algo = _Algo()
        _check(self._lib.cublasLtMatmulAlgoInit(self._handle, *self._types, config.algo_id,
                                                ctypes.byref(algo)),
               f"cublasLtMatmulAlgoInit({config.algo_id})")
        for name, attr, ctype in _CONFIG_ATTRS[1:]:
            v = ctype(getattr(config, name))
            status = self._lib.cublasLtMatmulAlgoConfigSetAttribute(
                ctypes.byref(algo), attr, ctypes.byref(v), ctypes.sizeof(v))
            if status != 0:
                raise InvalidConfig(f"cuBLASLt algo {config.algo_id} refuses {name}="
                                    f"{v.value} (status {status})")
        return algo

    def check(self, config: LtConfig) -> int:
        """The workspace bytes ``config`` needs for these tensors; ``InvalidConfig`` when
        cuBLASLt does not run it here (``cublasLtMatmulAlgoCheck``) or needs more workspace
        than a launch has."""
        algo = self._algo_of(config)
        result = _Heuristic()
        status = self._lib.cublasLtMatmulAlgoCheck(self._handle, self.desc, self.lt_a, self.lt_b,
                                                   self.lt_c, self.lt_c, ctypes.byref(algo),
                                                   ctypes.byref(result))
        if status != 0:
            raise InvalidConfig(f"cuBLASLt does not run {describe(config)} on this problem "
                                f"(status {status})")
        if result.workspace > WORKSPACE_BYTES:
            raise InvalidConfig(f"{describe(config)} needs {result.workspace} bytes of "
                                f"workspace, over {WORKSPACE_BYTES}")
        return int(result.workspace)

    def heuristics(self, count: int = 16) -> list[LtConfig]:
        """The heuristic's algorithms for these tensors, best-ranked first (at most
        ``count``)."""
        results = (_Heuristic * count)()
        returned = ctypes.c_int(0)
        _check(self._lib.cublasLtMatmulAlgoGetHeuristic(
            self._handle, self.desc, self.lt_a, self.lt_b, self.lt_c, self.lt_c, self.pref,
            count, results, ctypes.byref(returned)), "cublasLtMatmulAlgoGetHeuristic")
        return [self._config_of(results[i].algo) for i in range(returned.value)
                if results[i].state == 0]

    def _cap(self, algo: _Algo, attr: int) -> int:
        v, written = ctypes.c_uint32(), ctypes.c_size_t()
        status = self._lib.cublasLtMatmulAlgoCapGetAttribute(
            ctypes.byref(algo), attr, ctypes.byref(v), ctypes.sizeof(v), ctypes.byref(written))
        return int(v.value) if status == 0 else 0

    def _cap_ids(self, algo: _Algo, attr: int) -> list[int]:
        """An array capability (tile or stages ids): its size first, then its values."""
        needed = ctypes.c_size_t()
        if self._lib.cublasLtMatmulAlgoCapGetAttribute(ctypes.byref(algo), attr, None, 0,
                                                       ctypes.byref(needed)) != 0:
            return []
        values = (ctypes.c_uint32 * max(needed.value // 4, 1))()
        written = ctypes.c_size_t()
        if self._lib.cublasLtMatmulAlgoCapGetAttribute(
                ctypes.byref(algo), attr, ctypes.byref(values), needed.value,
                ctypes.byref(written)) != 0:
            return []
        return [int(v) for v in values[:written.value // 4]]

    def algo_ids(self, count: int = 128) -> list[int]:
        """Every algorithm id cuBLASLt has for these data types (``cublasLtMatmulAlgoGetIds``),
        whether or not it runs this problem."""
        ids, returned = (ctypes.c_int * count)(), ctypes.c_int(0)
        _check(self._lib.cublasLtMatmulAlgoGetIds(self._handle, *self._types, count, ids,
                                                  ctypes.byref(returned)),
               "cublasLtMatmulAlgoGetIds")
        return list(ids[:returned.value])

    def tiles_and_stages(self, algo_id: int) -> tuple[list[int], list[int]]:
        """The tile ids and stages ids algorithm ``algo_id`` offers (empty where it has none
        to choose: cuBLASLt then picks)."""
        algo = self._algo_of(LtConfig(algo_id))
        return self._cap_ids(algo, _CAP_TILE_IDS), self._cap_ids(algo, _CAP_STAGES_IDS)

    def custom_options(self, algo_id: int) -> int:
        """How many custom options algorithm ``algo_id`` has (``0 .. CUSTOM_OPTION_MAX``)."""
        return self._cap(self._algo_of(LtConfig(algo_id)), _CAP_CUSTOM_MAX) + 1

    def accepts(self, config: LtConfig) -> bool:
        """Whether cuBLASLt runs ``config`` on these tensors within the workspace."""
        try:
            self.check(config)
        except InvalidConfig:
            return False
        return True

    def variants(self, config: LtConfig, splits: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)
                 ) -> list[LtConfig]:
        """``config`` re-split along K (each reduction scheme the algorithm supports) and
        swizzled, keeping those cuBLASLt accepts for these tensors (``config`` itself first)."""
        algo = self._algo_of(config)
        split_ok = self._cap(algo, _CAP_SPLITK)
        schemes = [s for s in (1, 2, 4) if self._cap(algo, _CAP_REDUCTION_MASK) & s]
        swizzles = (0, 1) if self._cap(algo, _CAP_SWIZZLING) else (0,)
        out = [config]
        for swizzle in swizzles:
            for split in (splits if split_ok else (1,)):
                for scheme in (schemes if split > 1 else [0]):
                    c = replace(config, split_k=split, reduction=scheme, swizzle=swizzle)
                    if c not in out and self.accepts(c):
                        out.append(c)
        return out

    def resplit(self, config: LtConfig, split: int) -> LtConfig:
        """``config`` split ``split`` ways along K, its partial sums reduced by its own scheme
        where it had one, else the first the algorithm supports (fp32 first); checked."""
        if split == 1:
            resplit = replace(config, split_k=1, reduction=0)
            self.check(resplit)
            return resplit
        mask = self._cap(self._algo_of(config), _CAP_REDUCTION_MASK)
        schemes = [s for s in (config.reduction, 2, 1, 4) if s and mask & s]
        for scheme in dict.fromkeys(schemes):
            resplit = replace(config, split_k=split, reduction=scheme)
            if self.accepts(resplit):
                return resplit
        raise InvalidConfig(f"cuBLASLt does not run {describe(config)} split {split} ways "
                            "on this problem")

    def launcher(self, config: LtConfig):
        """A no-argument call that runs ``config`` on the current stream (checked first)."""
        self.check(config)
        algo = self._algo_of(config)
        lib, handle, desc = self._lib, self._handle, self.desc
        b_ptr, a_ptr, c_ptr = self._ptrs
        lt_a, lt_b, lt_c = self.lt_a, self.lt_b, self.lt_c
        alpha, beta = ctypes.byref(self._alpha), ctypes.byref(self._beta)
        ws, ws_bytes = ctypes.c_void_p(self._workspace.data_ptr()), WORKSPACE_BYTES
        algo_ref = ctypes.byref(algo)
        out = self._tensors[2]

        def call() -> torch.Tensor:
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            status = lib.cublasLtMatmul(handle, desc, alpha, b_ptr, lt_a, a_ptr, lt_b, beta,
                                        c_ptr, lt_c, c_ptr, lt_c, algo_ref, ws, ws_bytes, stream)
            if status != 0:
                raise LaunchError(f"cublasLtMatmul({describe(config)}) returned status {status}")
            return out

        call.keep = (algo, self)  # the algo struct and descriptors live as long as the call
        call.resolved = {**config.to_dict(), "describe": describe(config)}
        return call


def check_config(config: dict) -> tuple[int, int | None]:
    """A ``cublaslt`` configuration's ``(rank, split_k)`` (``split_k`` None: the algorithm's
    own); ``InvalidConfig`` names the key and the rule it breaks (``cluster`` and ``custom``
    are checked too: :func:`overrides` reads them)."""
    check_keys(config, ("rank",), ("split_k", "cluster", "custom"))
    rank, split = config["rank"], config.get("split_k")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < MAX_RANK:
        raise InvalidConfig(f"rank must be an integer in [0, {MAX_RANK}), got {rank!r}")
    if split is not None and (isinstance(split, bool) or not isinstance(split, int)
                              or not 1 <= split <= MAX_SPLIT_K):
        raise InvalidConfig(f"split_k must be an integer in [1, {MAX_SPLIT_K}], got {split!r}")
    overrides(config)
    return rank, split


def overrides(config: dict) -> dict[str, int]:
    """The ``LtConfig`` fields a configuration sets on its ranked algorithm besides the split:
    ``cluster`` (a thread-block cluster shape, ``"2x1"``: :data:`CLUSTERS`) and ``custom`` (the
    algorithm's custom option, an integer the worker checks against the algorithm's range)."""
    out: dict[str, int] = {}
    if "cluster" in config:
        cluster = config["cluster"]
        if not isinstance(cluster, str) or cluster not in CLUSTERS:
            raise InvalidConfig(f"cluster must be one of {sorted(CLUSTERS)}, got {cluster!r}")
        out["cluster"] = CLUSTERS[cluster]
    if "custom" in config:
        custom = config["custom"]
        if isinstance(custom, bool) or not isinstance(custom, int) or not 0 <= custom < 64:
            raise InvalidConfig(f"custom must be an integer in [0, 64), got {custom!r}")
        out["custom"] = custom
    return out


def resolve(gemm: LtGemm, config: dict) -> LtConfig:
    """The algorithm configuration a ``cublaslt`` candidate's ``config`` names for ``gemm``'s
    tensors: the heuristic's ``rank``, re-split along K (``split_k``), then with its cluster
    shape or custom option replaced (``cluster``, ``custom``). ``InvalidConfig`` when the
    heuristic ranks fewer algorithms, when a requested value is the ranked algorithm's own (the
    plain rank measures that one), or when cuBLASLt does not run the result."""
    rank, split = check_config(config)
    fields = overrides(config)
    ranked = gemm.heuristics(MAX_RANK)
    if rank >= len(ranked):
        raise InvalidConfig(f"cuBLASLt ranks {len(ranked)} algorithms for this problem; "
                            f"rank {rank} does not exist")
    chosen = ranked[rank]
    words = {"split_k": "split-K", "cluster": "cluster", "custom": "custom option"}
    for name, value in [("split_k", split), *fields.items()]:
        if value is not None and getattr(chosen, name) == value:
            raise InvalidConfig(f"rank {rank} already runs {words[name]} {config[name]}: the "
                                "same algorithm as the plain rank")
    if split is not None:
        chosen = gemm.resplit(chosen, split)
    if fields:
        if "custom" in fields:
            options = gemm.custom_options(chosen.algo_id)
            if fields["custom"] >= options:
                raise InvalidConfig(f"custom must be below {options} for cuBLASLt algo "
                                    f"{chosen.algo_id}, got {fields['custom']}")
        chosen = replace(chosen, **fields)
        gemm.check(chosen)
    return chosen
