"""Mutation testing (``python -m scripts.mutation``)."""
