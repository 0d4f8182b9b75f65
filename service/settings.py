"""Settings of the API process (environment prefix ``KS_``), read through ``get_settings()``."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service.tokens import UserToken, digest, parse_tokens, parse_worker_tokens

#: The token identity of ``KS_WORKER_TOKEN`` among the worker tokens.
DEFAULT_WORKER = "default"


class ServiceSettings(BaseSettings):
    """How the API stores its data and hands out work."""

    #: an error names the field and the rule, never the value (tokens are among them)
    model_config = SettingsConfigDict(env_prefix="KS_", extra="ignore",
                                      hide_input_in_errors=True)

    database_url: str = Field(
        "sqlite:///kernelsearch.db",
        description="SQLAlchemy URL; Optuna's studies live in the same database")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    lease_seconds: float = Field(120.0, gt=0, description="a lease expires unless renewed")
    max_attempts: int = Field(3, ge=1, description="expired leases before a candidate fails")
    retry_after_s: int = Field(
        5, ge=1, le=3600, description="Retry-After of a 503 while the database is unreachable")
    planning: Literal["inline", "background"] = Field(
        "inline", description="inline: leases, reports and job reads run the decision loop "
        "(Optuna's proposals and tells, the decisions) before they answer, as one process "
        "serving one user wants; background: they only mark the job (db table plan_marks) and a "
        "planner process plans it (`kernelsearch planner`, started by `serve` in this mode), "
        "so a fleet's requests answer in milliseconds")
    window: int = Field(16, ge=1, le=1024, description="outstanding candidates per job")
    cutlass_candidates: int = Field(
        6, ge=0, le=64, description="CUTLASS library candidates a job measures (its best-ranked"
        " ops at default knobs); 0: none")
    worker_token: str | None = Field(
        None, description="if set, worker endpoints require 'Authorization: Bearer <token>' "
        "with it or one of KS_WORKER_TOKENS; its token identity is named 'default'")
    worker_tokens: Annotated[tuple[UserToken, ...], NoDecode] = Field(
        (), description="named worker tokens, comma-separated 'name:token' entries (one per "
        "host or party running workers; service.tokens), accepted beside KS_WORKER_TOKEN. A "
        "worker keeps the identity (the name) of the token it registered with; with more than "
        "one identity a held result is confirmed only by a worker of another identity. Kept "
        "as SHA-256 digests only")
    api_tokens: Annotated[tuple[UserToken, ...], NoDecode] = Field(
        (), description="users' tokens, comma-separated 'name:token' or 'name:token:admin' "
        "entries (service.tokens); when any is set every write needs 'Authorization: Bearer "
        "<token>', and the job records its owner. Kept as SHA-256 digests only")
    public_reads: bool = Field(
        True, description="reads (GET /v1/..., the dashboard) need no token; false: they need "
        "a user token too (when tokens are configured)")
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="origins allowed to call the API from a browser, comma-separated "
        "(default none: CORS closed)")
    max_queued_jobs: int = Field(1000, ge=1, description="queued or running jobs in all; "
                                 "more is a 429")
    max_queued_jobs_per_owner: int = Field(100, ge=1, description="queued or running jobs of "
                                           "one token (one owner); more is a 429")
    implausible_below: float = Field(
        0.5, ge=0, le=1, description="a kernel measured faster than this share of its "
        "roofline time is held until another worker confirms it (0: never held)")
    held_wait_seconds: float = Field(
        600.0, ge=0, description="how long after a result is held a job whose search is "
        "over waits for another worker to re-measure it before it decides without it (the "
        "job's time budget still ends it; 0: no wait)")
    max_problem_bytes: int = Field(64 << 30, ge=1, description="operand bytes a job may need")
    max_body_bytes: int = Field(
        8 << 20, ge=1024, description="largest request body (a worker's CUTLASS catalogue is "
        "about 0.6 MB); larger ones are a 413")
    default_max_trials: int = Field(64, ge=1, le=10_000)
    migrate_on_startup: bool = Field(True, description="run 'alembic upgrade head' at startup")
    dashboard: bool = Field(True, description="serve the read-only web dashboard at /ui (and "
                            "redirect / there)")
    plugins: str = Field(
        "", description="comma-separated modules imported at start that register problem kinds "
        "(search.kinds.register) and their kernels, e.g. 'mypkg.kinds.scan'")

    @field_validator("api_tokens", "worker_tokens", mode="before")
    @classmethod
    def _tokens(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str) or (isinstance(value, list | tuple)
                                      and all(isinstance(v, str) for v in value)):
            parse = parse_tokens if info.field_name == "api_tokens" else parse_worker_tokens
            return parse(value)
        return value

    @model_validator(mode="after")
    def _one_identity_per_token(self) -> ServiceSettings:
        if self.worker_token and self.worker_tokens:
            if any(t.name == DEFAULT_WORKER for t in self.worker_tokens):
                raise ValueError(f"KS_WORKER_TOKENS: the name {DEFAULT_WORKER!r} is "
                                 "KS_WORKER_TOKEN's; choose another")
            if any(t.sha256 == digest(self.worker_token) for t in self.worker_tokens):
                raise ValueError("KS_WORKER_TOKENS: an entry has KS_WORKER_TOKEN's token; "
                                 "each identity needs its own")
        return self

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(o.strip() for o in value.split(",") if o.strip())
        return value

    @property
    def worker_identities(self) -> tuple[UserToken, ...]:
        """The worker tokens by identity: KS_WORKER_TOKENS' and KS_WORKER_TOKEN's
        (``default``); none: worker endpoints are open."""
        single = ((UserToken(DEFAULT_WORKER, digest(self.worker_token)),)
                  if self.worker_token else ())
        return self.worker_tokens + single

    @property
    def distinct_confirmers(self) -> bool:
        """Whether a held result needs a worker of another token identity to confirm it (more
        than one identity configured), not just another worker."""
        return len(self.worker_identities) > 1

    @property
    def plugin_modules(self) -> tuple[str, ...]:
        return tuple(m.strip() for m in self.plugins.split(",") if m.strip())


@lru_cache
def get_settings() -> ServiceSettings:
    return ServiceSettings()
