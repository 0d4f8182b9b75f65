"""``workers`` names no problem kind and no backend: what a backend needs of a worker host
(whether it runs here, its catalogue, building ahead, warming up, preloading) is registered
with it in ``kernel_templates``. This fails when someone special-cases one again."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parents[2] / "workers"
#: GEMM and its backends, as a value a worker could compare or pass around
NAMES = {"gemm", "cublas", "cutlass", "triton", "repaired", "triton_repair", "triton_streamk",
         "triton_skinny"}


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    # dict keys name fields of the run environment ("triton": its version), not backends
    keys = {id(k) for node in ast.walk(tree) if isinstance(node, ast.Dict) for k in node.keys}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and node.value.lower() in NAMES and id(node) not in keys):
            found.append(f"line {node.lineno}: {node.value!r}")
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        found += [f"line {node.lineno}: imports {m}" for m in modules
                  if m.startswith("kernel_templates.gemm") or m.startswith("search.kinds.gemm")
                  or m.startswith("cutlass")]
    return found


@pytest.mark.parametrize("path", sorted(WORKERS.glob("*.py")), ids=lambda p: p.name)
def test_workers_name_no_kind_and_no_backend(path: Path) -> None:
    assert _offences(path) == []


def test_the_check_catches_a_special_case(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('if candidate.backend == "cutlass":\n'
                      '    from kernel_templates.gemm import cutlass\n')
    assert len(_offences(sample)) == 3  # the name, the package and the module imported
