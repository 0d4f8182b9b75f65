"""Tools run on purpose, not by the service: ``python -m scripts.bench`` (benchmarks and the
CUTLASS cache builder) and the shell entry points of a GPU host (``gpu_session.sh``,
``wheelhouse.sh``)."""
