"""Engines and the one session helper that commits or rolls back.

SQLite gets WAL, a busy timeout (30 s, or the URL's ``?timeout=``) and foreign keys. Write
transactions on SQLite start with ``BEGIN IMMEDIATE`` so two writers queue on the lock instead of
failing when a reader upgrades to a writer; read sessions use a deferred ``BEGIN``. Postgres goes
through psycopg 3, with pooled connections checked before use and a connect timeout, so a
database that went away is an error within seconds (``service.outages`` answers it with a 503),
not a hang, and the pool reconnects once it is back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.orm import Session
from sqlalchemy.pool import Pool

_READ_ONLY = "ks_read_only"
#: Seconds a SQLite writer waits for the lock (unless the URL says ``?timeout=``).
SQLITE_TIMEOUT_S = 30.0
#: Seconds to open a Postgres connection before giving up (unless the URL says otherwise).
CONNECT_TIMEOUT_S = 5


def normalize_url(url: str) -> str:
    """``postgres://`` and ``postgresql://`` mean psycopg 3 here (psycopg2 is not installed)."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


#: Postgres connections an engine keeps, and how many more it may open at a busy moment.
POOL_SIZE, POOL_OVERFLOW = 20, 20


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` with the per-dialect settings above."""
    url = normalize_url(url)
    query = make_url(url).query
    connect_args: dict[str, Any] = {}
    if url.startswith("sqlite"):
        connect_args = {"timeout": float(query.get("timeout", SQLITE_TIMEOUT_S)),
                        "check_same_thread": False}
        connect_args.update(kwargs.pop("connect_args", {}))
        engine = create_engine(url, connect_args=connect_args, **kwargs)
        _configure_sqlite(engine, float(connect_args["timeout"]))
        return engine
    if "connect_timeout" not in query:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    connect_args.update(kwargs.pop("connect_args", {}))
    kwargs.setdefault("pool_pre_ping", True)
    # as many kept connections as an API process's thread pool runs requests at once: past
    # pool_size a connection is opened for one request and closed after it (a new Postgres
    # backend each time, which costs more than the request)
    kwargs.setdefault("pool_size", POOL_SIZE)
    kwargs.setdefault("max_overflow", POOL_OVERFLOW)
    return create_engine(url, connect_args=connect_args, **kwargs)


def commit_without_flush_wait() -> None:
    """From now on, every Postgres connection this process opens (any engine's: Optuna's
    storage too) commits without waiting for its write-ahead log to reach the disk
    (``synchronous_commit = off``); SQLite's are left alone. For a process whose writes can be
    made again (the planner: ``kernelsearch planner --async-commit``): its commits stop
    queueing on the disk's flushes beside the requests' own, and a database crash loses at
    most its last fraction of a second of commits, never a later transaction's (the log is
    written in order, and every commit that waits for the flush flushes what came before)."""
    if not event.contains(Pool, "connect", _no_flush_wait):
        event.listen(Pool, "connect", _no_flush_wait)


def _no_flush_wait(dbapi_connection: Any, _record: Any) -> None:
    if type(dbapi_connection).__module__.startswith("psycopg"):
        # a SET is transactional: committed here, before the pool hands the connection out
        dbapi_connection.execute("SET synchronous_commit = off")
        dbapi_connection.commit()


def _configure_sqlite(engine: Engine, timeout_s: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take over transaction control from pysqlite so "begin" below decides the BEGIN kind.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        read_only = conn.get_execution_options().get(_READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


class Database:
    """One database: its engine and the scoped-session helpers every repository call runs in."""

    def __init__(self, url: str, **engine_kwargs: Any) -> None:
        self.url = normalize_url(url)
        self.engine = make_engine(self.url, **engine_kwargs)
        self._read_engine = self.engine.execution_options(**{_READ_ONLY: True})
        self._autocommit_engine = self._read_engine.execution_options(
            isolation_level="AUTOCOMMIT")

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A write transaction: commits when the block ends, rolls back if it raises."""
        with Session(self.engine, expire_on_commit=False) as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A read-only transaction (a deferred ``BEGIN`` on SQLite); always rolled back."""
        with Session(self._read_engine, expire_on_commit=False) as session:
            try:
                yield session
            finally:
                session.rollback()

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A read-only connection whose every statement is a transaction of its own (no
        ``BEGIN``/``ROLLBACK`` round trips on Postgres): for a hot path's single-query reads."""
        with self._autocommit_engine.connect() as conn:
            yield conn

    @contextmanager
    def reads(self) -> Iterator[Session]:
        """A read-only session over an :meth:`autocommit` connection: on Postgres each of its
        statements reads the latest commits, as a :meth:`read_session`'s do under READ
        COMMITTED (a snapshot per statement), without the ``BEGIN`` and ``ROLLBACK`` round
        trips; on SQLite it is one deferred read transaction. For a hot path's reads of a few
        statements."""
        with self.autocommit() as conn, Session(conn, expire_on_commit=False) as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
