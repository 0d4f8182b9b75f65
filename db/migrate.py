"""Run the service's Alembic migrations from code: ``upgrade(url)`` is ``alembic upgrade head``.

The migrations ship inside the package (``db/migrations``), so an installed service finds them
without an ``alembic.ini``. Their version table is ``ks_alembic_version``: Optuna keeps its own
``alembic_version`` in the same database.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, text

from db.engine import make_engine, normalize_url
from search.optimizer import create_storage_tables

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "ks_alembic_version"
#: Postgres advisory-lock key so that API replicas starting together migrate one at a time.
_LOCK_KEY = 0x6B73_6D69  # "ksmi"


def alembic_config(url: str, connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(url: str, revision: str = "head", *, studies: bool = False) -> None:
    """Bring the database at ``url`` to ``revision`` (a no-op when it is already there); with
    ``studies``, create Optuna's tables too, under the same lock, so that API processes starting
    together on a new database do not race to create them."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _LOCK_KEY})
                connection.commit()
            try:
                command.upgrade(alembic_config(url, connection), revision)
                connection.commit()
                if studies:
                    create_storage_tables(normalize_url(url))
            finally:
                if connection.dialect.name == "postgresql":
                    connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _LOCK_KEY})
                    connection.commit()
    finally:
        engine.dispose()


def current(url: str) -> str | None:
    """The revision the database is at (None before the first migration)."""
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            ctx = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            return ctx.get_current_revision()
    finally:
        engine.dispose()
