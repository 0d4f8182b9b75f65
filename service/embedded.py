"""The service inside another program: uvicorn on a loopback port, in a background thread.

``kernelsearch tune`` uses this to run the whole system in one process tree (service, SQLite,
local worker) while the worker still talks to the service over real HTTP.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from service.app import create_app
from service.settings import ServiceSettings


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EmbeddedServer:
    """Start with ``with EmbeddedServer(settings) as server: ... server.url``."""

    def __init__(self, settings: ServiceSettings, host: str = "127.0.0.1",
                 port: int | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        config = uvicorn.Config(create_app(settings), host=host, port=self.port,
                                log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True,
                                        name="kernelsearch-service")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> EmbeddedServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the embedded service did not start on {self.url}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
