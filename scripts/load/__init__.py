"""The load benchmark: the API on a seeded Postgres, driven by locust (``python -m scripts.load
run --help``; docs/benchmarks/load_*.md)."""
