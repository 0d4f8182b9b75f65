"""The HTTP API: FastAPI app, routes, schemas, settings, orchestration, client and CLI."""
