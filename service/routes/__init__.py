"""HTTP routers, one file per resource; each is a thin wrapper around ``service.flow``."""
