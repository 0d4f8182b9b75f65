"""Benchmarks: GPU runs made on purpose, never tests. One entry point::

    python -m scripts.bench gemm --shapes docs/benchmarks/gemm_public.json --out DIR
    python -m scripts.bench agent --shapes docs/benchmarks/gemm_public.json --out DIR
    python -m scripts.bench cutlass-cache --max-ops 12 --cache DIR

Each prints a Markdown table and writes it with a compact JSON summary under ``--out``. Every
kernel is measured through the worker's own path (``workers.execute`` or a local worker of the
embedded service): checked on fresh random inputs against the reference, then timed.
"""
