"""Alembic environment of the service's tables (run through ``db.migrate``)."""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Connection

from db.engine import make_engine
from db.migrate import VERSION_TABLE
from db.models import Base

config = context.config
target_metadata = Base.metadata


def _include_object(obj: Any, name: str | None, type_: str, reflected: bool,
                    compare_to: Any) -> bool:
    # Optuna's tables share the database; autogenerate must neither see nor drop them.
    if type_ == "table" and reflected and name not in target_metadata.tables:
        return False
    return True


def _run(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        _sqlite_foreign_keys(connection, False)
    try:
        context.configure(connection=connection, target_metadata=target_metadata,
                          version_table=VERSION_TABLE, include_object=_include_object,
                          render_as_batch=sqlite)
        with context.begin_transaction():
            context.run_migrations()
    finally:
        if sqlite:
            _sqlite_foreign_keys(connection, True)


def _sqlite_foreign_keys(connection: Connection, on: bool) -> None:
    """A SQLite batch migration copies a table, drops it and renames the copy; with foreign
    keys enforced, dropping a table that other rows reference fails. The pragma is ignored
    inside a transaction, so it goes to the driver's connection, outside SQLAlchemy's."""
    if not connection.in_transaction():
        connection.connection.driver_connection.execute(  # type: ignore[union-attr]
            f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")


def run_migrations_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"),
                      target_metadata=target_metadata, version_table=VERSION_TABLE,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
