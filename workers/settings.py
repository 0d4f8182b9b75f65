"""Settings of a worker process (environment prefix ``KS_``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from workers.identity import default_state_dir


class WorkerSettings(BaseSettings):
    """How a worker finds the service and how it runs candidates."""

    model_config = SettingsConfigDict(env_prefix="KS_", extra="ignore")

    url: str = Field("http://127.0.0.1:8000", description="base URL of the service")
    worker_token: str | None = Field(None, description="bearer token the service expects")
    token: str | None = Field(
        None, description="a user's token (one of the service's KS_API_TOKENS) the CLI's "
        "commands send: submit, cancel, and reads where they are not public")
    worker_name: str | None = Field(None, description="name shown in the service (default: host)")
    batch: int = Field(8, ge=1, le=64, description="candidates leased at a time")
    candidate_timeout_s: float = Field(180.0, gt=0, description="per-candidate limit")
    poll_s: float = Field(1.0, gt=0, description="wait between empty leases")
    max_backoff_s: float = Field(
        30.0, gt=0, description="longest wait between retries while the service is unavailable "
        "(the waits grow from poll_s, doubling, jittered)")
    interpret: bool | None = Field(
        None, description="run Triton in its CPU interpreter (default: when there is no GPU)")
    state_dir: Path = Field(
        default_factory=default_state_dir, description="where the worker keeps what must "
        "survive a restart: the secret its first registration got (default "
        "~/.cache/kernelsearch/worker)")
    compile_workers: int = Field(0, ge=0, description="parallel compile processes (0: auto)")
    plugins: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="modules that register more kernels on import, comma-separated "
        "(imported by the worker, its benchmark child and its compile pool)")

    @field_validator("plugins", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        return value


@lru_cache
def get_worker_settings() -> WorkerSettings:
    return WorkerSettings()
