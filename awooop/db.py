"""The process's SQLAlchemy engines, one per process role.

**Every statement commits by itself.** The engine runs in autocommit mode: the hot paths
(admission, claim, step records, sweeps) are single statements — data-modifying CTEs — so
each is atomic on its own, and psycopg2 no longer spends a round trip on ``BEGIN`` and
another on ``COMMIT``. Work that needs several statements in one transaction must use
:func:`transaction`; ``engine.begin()`` on this engine does *not* group statements.

**Every connection is bounded**: the session has ``statement_timeout`` and
``lock_timeout`` for its role (web, worker, keeper, sweeps), and TCP keepalives plus
``tcp_user_timeout``, so neither a lock queue nor a dead peer stalls a process. The timeouts
travel in libpq's ``options`` startup parameter; behind a pooler that refuses it (PgBouncer)
``AWOOOP_DATABASE_SESSION_OPTIONS=false`` leaves it out and the server sets them instead. The lease
keeper renews on its own small pool (:func:`keeper_engine`) so that renewals never queue
behind step work, and bounds each renewal on the client side too (:func:`bounded`): a
half-open connection answers nothing, and only the client can give up on it.

**A connection the server closed is not used.** There is no ``pool_pre_ping`` (a round trip
per checkout). Instead, a checkout looks at the pooled connection's socket without a round
trip: an idle PostgreSQL connection has nothing to read, so a readable socket means the
server ended the session (a restart, ``pg_terminate_backend``, an idle timeout) and the pool
opens a fresh connection before the statement is sent. A connection that dies later fails
its statement; :func:`retry_on_disconnect` runs a single idempotent statement once more on a
fresh connection.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import select
import socket
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from awooop.config import Settings, get_settings
from awooop.store import monitoring, prepared

log = logging.getLogger("awooop.db")

WEB = "web"
WORKER = "worker"
KEEPER = "keeper"
SWEEPS = "sweeps"
ROLES = (WEB, WORKER, KEEPER, SWEEPS)

T = TypeVar("T")


def connect_args(settings: Settings, role: str) -> dict[str, Any]:
    """libpq parameters of a ``role`` connection: timeouts (unless the settings leave the
    session options to the server), keepalives, a telling name."""
    if role not in ROLES:
        raise ValueError(f"unknown database role {role!r}; one of {ROLES}")
    args: dict[str, Any] = {
        # Answer quickly with 503 instead of hanging when the database is down.
        "connect_timeout": 2 if role == KEEPER else 5,
        "application_name": f"awooop-{role}",
        "keepalives": 1,
        "keepalives_idle": settings.db_keepalives_idle_seconds,
        "keepalives_interval": settings.db_keepalives_interval_seconds,
        "keepalives_count": settings.db_keepalives_count,
        "tcp_user_timeout": _ms(settings.db_tcp_user_timeout_seconds),
    }
    if settings.database_session_options:
        statement_ms = _ms(settings.statement_timeout(role))
        lock_ms = _ms(settings.lock_timeout(role))
        args["options"] = f"-c statement_timeout={statement_ms} -c lock_timeout={lock_ms}"
    return args


def make_engine(
    database_url: str | URL,
    pool_size: int | None = None,
    *,
    role: str = WEB,
    settings: Settings | None = None,
) -> Engine:
    """An autocommit engine whose sessions carry ``role``'s limits (``settings``, or the
    defaults of :class:`~awooop.config.Settings`), and whose hot statements are prepared
    unless the settings say not to (:mod:`awooop.store.prepared`). Its pool holds
    ``pool_size`` connections, by default the role's (:func:`role_pool_size`)."""
    settings = settings or Settings()
    size = role_pool_size(settings, role) if pool_size is None else pool_size
    engine = create_engine(
        database_url,
        isolation_level="AUTOCOMMIT",
        pool_size=size,
        max_overflow=size,
        pool_pre_ping=False,
        pool_recycle=1800,
        connect_args=connect_args(settings, role),
        execution_options={prepared.PREPARE: settings.database_prepared_statements},
    )
    event.listen(engine, "checkout", _refuse_closed_by_server)
    _SETTINGS[engine] = settings
    return engine


def make_probe_engine(
    database_url: str,
    timeout_seconds: float,
    *,
    session_options: bool = True,
    application_name: str = "awooop-readyz",
) -> Engine:
    """An engine for health checks: a fresh connection per check, failing within about
    ``timeout_seconds`` (libpq's connect timeout is whole seconds, at least 2). Without
    ``session_options`` (a pooler that refuses them) the check's statement timeout is the
    server's."""
    args: dict[str, Any] = {
        "connect_timeout": max(2, math.ceil(timeout_seconds)),
        "application_name": application_name,
    }
    if session_options:
        args["options"] = f"-c statement_timeout={_ms(timeout_seconds)}"
    return create_engine(
        database_url, isolation_level="AUTOCOMMIT", poolclass=NullPool, connect_args=args
    )


def answers(engine: Engine, timeout_seconds: float = 2.0) -> bool:
    """Whether the database ``engine`` reaches answers now: one ``SELECT 1`` on a fresh
    connection (not one of the pool's, which may be the ones that stopped answering), given
    up after about ``timeout_seconds``."""
    probe = make_probe_engine(
        engine.url.render_as_string(hide_password=False),
        timeout_seconds,
        session_options=False,
        application_name="awooop-probe",
    )
    try:
        with probe.connect() as conn, bounded(conn, timeout_seconds):
            monitoring.ping(conn)
        return True
    except exc.DBAPIError:
        return False
    finally:
        probe.dispose()


def transaction(engine: Engine) -> AbstractContextManager[Connection]:
    """``with db.transaction(engine) as conn:`` — several statements, one transaction."""
    return engine.execution_options(isolation_level="READ COMMITTED").begin()


_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def role_pool_size(settings: Settings, role: str) -> int:
    """Connections a ``role`` process keeps pooled: the lease keeper's
    ``AWOOOP_DB_KEEPER_POOL_SIZE``, else ``AWOOOP_DB_POOL_SIZE``, and in a web process one
    more per request thread, which the thread keeps for its admissions
    (:func:`thread_connection`). (A thread that finds every pooled connection busy opens
    one more, which is closed when it comes back while the pool is full: with fewer pooled
    connections than its threads use at once, a busy web process started a server process
    for a request every few requests.)"""
    if role == KEEPER:
        return settings.db_keeper_pool_size
    if role == WEB:
        return settings.db_pool_size + settings.web_threads
    return settings.db_pool_size


def get_engine(role: str = WEB) -> Engine:
    """The process's engine for ``role`` (the web app asks without one)."""
    with _ENGINES_LOCK:
        engine = _ENGINES.get(role)
        if engine is None:
            settings = get_settings()
            engine = make_engine(settings.database_url, role=role, settings=settings)
            _ENGINES[role] = engine
        return engine


def read_engine(settings: Settings, primary: Engine) -> Engine:
    """The engine of the web's reads that may lag behind the primary — the console's list
    pages and ``/metrics``' gauges: a pool to the standby ``AWOOOP_DATABASE_REPLICA_URL``
    names (the web role's limits), or ``primary`` when it is empty.

    Only reads whose reader can live with the standby's replay lag go there: a run admitted
    a moment ago may be missing from a list for that long. Everything AwoooP's correctness
    rests on (admission, claims, leases, the write a page's form makes, the page of one run
    read after it) stays on ``primary``.
    """
    if not settings.database_replica_url:
        return primary
    return make_engine(settings.database_replica_url, role=WEB, settings=settings)


# The settings each engine was made with, and the keeper's companion engine of each.
_SETTINGS: weakref.WeakKeyDictionary[Engine, Settings] = weakref.WeakKeyDictionary()
_KEEPER_ENGINES: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()
_KEEPER_LOCK = threading.Lock()


def keeper_engine(engine: Engine) -> Engine:
    """A small pool to ``engine``'s database with the keeper's limits, made on first use and
    disposed with ``engine``: lease renewals never wait for a connection doing step work."""
    with _KEEPER_LOCK:
        companion = _KEEPER_ENGINES.get(engine)
        if companion is None:
            settings = _SETTINGS.get(engine) or Settings()
            companion = make_engine(engine.url, role=KEEPER, settings=settings)
            _KEEPER_ENGINES[engine] = companion
            event.listen(engine, "engine_disposed", _dispose_keeper_engine)
        return companion


def keeper_deadline(engine: Engine, interval: float) -> float:
    """How long one renewal through ``keeper_engine(engine)`` may take: the keeper's statement
    timeout, at most half the renewal ``interval`` — so that after one renewal hung until its
    deadline, a retry still lands before ``ttl - interval`` (two intervals when the TTL is
    three)."""
    settings = _SETTINGS.get(engine) or Settings()
    return min(settings.statement_timeout(KEEPER), interval / 2)


def _dispose_keeper_engine(engine: Engine) -> None:
    with _KEEPER_LOCK:
        companion = _KEEPER_ENGINES.pop(engine, None)
    if companion is not None:
        companion.dispose()


def dispose_after_fork() -> None:
    """Drop pooled connections inherited from a parent process without closing them."""
    with _KEEPER_LOCK:
        companions = list(_KEEPER_ENGINES.values())
        _KEEPER_ENGINES.clear()
    with _ENGINES_LOCK:
        engines = list(_ENGINES.values())
    for engine in [*companions, *engines]:
        engine.dispose(close=False)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _refuse_closed_by_server(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Checkout: an idle connection with something to read was ended by the server (its
    last words, or end of file). Raising DisconnectionError makes the pool connect anew."""
    if _readable(dbapi_connection):
        log.info(
            "pooled connection closed by the server; reconnecting", extra={"action": "db_reconnect"}
        )
        raise exc.DisconnectionError("the server closed this pooled connection")


def _readable(dbapi_connection: Any) -> bool:
    try:
        fd = dbapi_connection.fileno()
    except Exception:  # already closed on our side
        return True
    if _poll is None:
        poller = select.poll()
        poller.register(fd, _POLL_EVENTS)
        return bool(poller.poll(0))
    pollfd = _PollFd(fd, _POLL_EVENTS, 0)
    return _poll(ctypes.byref(pollfd), 1, 0) != 0  # -1, an error: not to be trusted either


_POLL_EVENTS = select.POLLIN | select.POLLERR | select.POLLHUP


class _PollFd(ctypes.Structure):
    _fields_ = (("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short))


def _poll_keeping_the_gil() -> Any:
    """libc's ``poll(2)``, called without releasing the GIL; None where it cannot be found.

    The checkout's poll has a zero timeout: it never blocks. ``select.poll()`` releases the
    GIL around it all the same, and in a web process whose request threads keep the GIL busy,
    taking it back made a checkout wait behind the other threads' work: milliseconds for a
    call of a microsecond, at the tail of every request. A function of a ``ctypes.PyDLL``
    keeps the GIL, and costs less CPU than making, registering and polling a
    ``select.poll`` object.
    """
    try:
        poll = ctypes.PyDLL(None).poll
    except (OSError, AttributeError, TypeError):
        return None
    poll.argtypes = (ctypes.POINTER(_PollFd), ctypes.c_ulong, ctypes.c_int)
    poll.restype = ctypes.c_int
    return poll


_poll = _poll_keeping_the_gil()


@contextmanager
def bounded(conn: Connection, seconds: float) -> Iterator[Connection]:
    """Give up on ``conn`` after ``seconds``: a statement still waiting then fails with a
    disconnect error (its socket is shut down) and the pool discards the connection.

    The server's ``statement_timeout`` cannot help when the server never sees the statement
    or its answer never arrives (a half-open connection); only the client can stop waiting.
    A failure here is not retried on another connection (the caller decides).
    """
    dbapi_connection = conn.connection.dbapi_connection
    assert dbapi_connection is not None
    sock = socket.socket(fileno=os.dup(dbapi_connection.fileno()))
    lock = threading.Lock()
    finished = False

    def expire() -> None:
        with lock:
            if not finished:
                log.warning(
                    "database connection did not answer in time; abandoning it",
                    extra={"action": "db_connection_abandoned", "timeout_s": seconds},
                )
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield conn
    finally:
        with lock:
            finished = True
        timer.cancel()
        sock.close()


class Connects(Protocol):
    """What hands out connections: an :class:`~sqlalchemy.Engine`, or a
    :class:`HeldConnection`."""

    def connect(self) -> AbstractContextManager[Connection]: ...


class HeldConnection:
    """One pooled connection kept for a run segment's statements, rather than a checkout and
    a check-in around each: the pool's bookkeeping was an eighth of a worker's CPU per run.

    Only for a single thread's autocommit statements. Before each use the connection is
    looked at as a checkout would (:func:`_readable`): one the server ended meanwhile — the
    handler of a step may run for minutes — is replaced. A statement that raises gives the
    connection back to the pool (invalidated if the driver lost it), so a retry starts on a
    fresh one; :meth:`close` gives it back at the end of the segment."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._conn: Connection | None = None

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        conn = self._conn
        if conn is not None:
            if not conn.invalidated and _readable(conn.connection.dbapi_connection):
                conn.invalidate()  # ended by the server: not given back to the pool
            if conn.invalidated:
                self.close()
                conn = None
        if conn is None:
            conn = self._conn = self.engine.connect()
        try:
            yield conn
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class _ThreadHeld:
    """A thread's :class:`HeldConnection`, given back to its pool when the thread ends (its
    local data is cleared) or when the thread asks for another engine's."""

    __slots__ = ("held", "pid")
    held: HeldConnection
    pid: int

    def __init__(self, held: HeldConnection) -> None:
        self.held, self.pid = held, os.getpid()

    def __del__(self) -> None:
        if self.pid != os.getpid():
            return  # a forked child's copy: the session is its parent's
        with contextlib.suppress(Exception):  # also at interpreter exit
            self.held.close()


_thread_held = threading.local()


def thread_connection(engine: Engine) -> HeldConnection:
    """The calling thread's own connection of ``engine``, kept from one call to the next: a
    web request thread's admission statement runs on it, as Django's persistent connections
    keep one per thread. It is looked at before each use as a checkout would look at it, and
    given back to the pool when a statement on it fails.

    Under load, the pool's checkout and check-in around each request (a lock the request
    threads contend for, and the checkout's bookkeeping) were about a tenth of a web
    process's CPU per admission (bench/NOTES.md). The pool counts the connection as checked
    out for as long as the thread keeps it, so a web process pools one per request thread
    besides the others (:func:`role_pool_size`). Only for single autocommit statements,
    like :class:`HeldConnection`."""
    kept = getattr(_thread_held, "kept", None)
    if kept is not None and kept.held.engine is engine:
        return kept.held
    release_thread_connection()  # another engine's, if any
    kept = _thread_held.kept = _ThreadHeld(HeldConnection(engine))
    return kept.held


def release_thread_connection() -> None:
    """Give the calling thread's kept connection (:func:`thread_connection`) back to its
    pool now, e.g. before its engine is disposed."""
    kept = getattr(_thread_held, "kept", None)
    if kept is not None:
        del _thread_held.kept
        kept.held.close()


def retry_on_disconnect(engine: Connects, statement: Callable[[Connection], T]) -> T:
    """Run ``statement(conn)`` on a connection of ``engine``; when it fails because the
    server closed the connection, run it once more on a fresh one.

    Only for a single autocommit statement that is safe to apply twice — a read, or a
    compare-and-set such as a claim, a fenced write or admission's dedupe insert: the first
    try may have committed before its reply was lost.
    """
    try:
        with engine.connect() as conn:
            return statement(conn)
    except exc.DBAPIError as error:
        if not error.connection_invalidated:
            raise
        log.warning(
            "statement failed on a connection the server closed; retrying once",
            extra={"action": "db_retry_on_disconnect"},
        )
    with engine.connect() as conn:
        return statement(conn)
