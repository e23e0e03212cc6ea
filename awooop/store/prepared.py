"""Hot statements prepared once per database connection.

PostgreSQL plans a statement every time it is sent as text; for the data-modifying CTEs on
the hot paths (admission, claim, step record, finish, renew) planning is about a third of
their cost. psycopg2 has no server-side prepared statements of its own, so a
:class:`PreparedStatement` sends ``PREPARE name AS …`` with the first ``EXECUTE name(…)``
of a pooled connection, then ``EXECUTE name(…)`` alone. The SQL stays written once, with
``:name`` parameters.

PostgreSQL plans an ``EXECUTE`` with the statistics of that moment and, after five
executions, may keep one generic plan for the session. It caches the plans of its own
foreign-key checks the same way: an admission's history row checks its run with a cached
``SELECT 1 FROM awooop_run_state WHERE run_id = $1``. A plan made while the tables were tiny
— a fresh database, tables analyzed while empty, the first minute before autovacuum's first
ANALYZE — scans them sequentially, cheap then, and would go on scanning them as they grow
until an ANALYZE happened to invalidate it (bench/NOTES.md has what that cost). So a
connection drops every plan its session has cached (``DISCARD PLANS``: the prepared
statements stay, planned again at their next ``EXECUTE``) soon after its first statement
here (0.5 s), then twice as long after each time, then every :data:`REPLAN_AFTER_SECONDS`.
Planned again, a statement sees the tables' current size (the planner scales the last
statistics by the relation's pages now), so once the tables have grown its plan reads
through the indexes, ANALYZE or not. The discard travels with an ``EXECUTE`` (no round trip
or transaction of its own) and costs one planning per cached statement: nothing, every few
seconds. A planner switch such as ``enable_seqscan`` would keep the plans on the indexes
too, but for every statement, always, and would hide a missing index.

A prepared statement lives in one server session. Behind a pooler in transaction mode
(PgBouncer) each transaction runs on whichever server connection is free, where the
statement may not exist; PgBouncer's own prepared-statement support covers protocol-level
prepares only, never SQL ``PREPARE``. So with ``AWOOOP_DATABASE_PREPARED_STATEMENTS=false``
:func:`awooop.db.make_engine` gives its engine the execution option :data:`PREPARE` = False,
and on its connections these statements are sent as plain SQL with their parameters (the
``DISCARD PLANS`` still travels with them: the foreign-key checks' plans are cached
whichever server session runs them).

They run on the connection's DBAPI cursor, not through SQLAlchemy's execution path: for
these few fixed statements SQLAlchemy's per-statement context and result metadata cost about
a quarter of the runner's own CPU (bench/NOTES.md). What SQLAlchemy would add on failure is
kept: a DBAPI error is raised as SQLAlchemy's :class:`~sqlalchemy.exc.DBAPIError`, and a
connection the driver lost is invalidated (``connection_invalidated``), so the retry and
fencing code reads errors one way. Listeners of SQLAlchemy's statement events (a tracer)
still see these statements.
"""

from __future__ import annotations

import re
import time
from collections import namedtuple
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, exc

_PARAM = re.compile(r"(?<![:\w]):(\w+)")

# Sent before a statement whose commit need not wait for the WAL flush (transaction-scoped,
# so it is safe behind a pooler in transaction mode).
_ASYNC_COMMIT = "SET LOCAL synchronous_commit TO OFF"
# Sent before the EXECUTE of a statement that must run on its generic plan (see
# PreparedStatement); a plain statement is planned every time whatever this says.
_GENERIC_PLAN = "SET LOCAL plan_cache_mode TO force_generic_plan"

# When a connection drops the plans its session cached: this long after its first statement
# here, then twice as long each time, up to REPLAN_AFTER_SECONDS (see the module docstring).
FIRST_REPLAN_SECONDS = 0.5
REPLAN_AFTER_SECONDS = 10.0
_clock = time.monotonic  # tests move it

# The execution option saying whether a connection's statements are prepared (default: yes).
PREPARE = "awooop_prepare"

_DISCARD_PLANS = "DISCARD PLANS; "


def _pyformat(sql: str) -> str:
    """``sql`` with ``:name`` parameters as psycopg2's ``%(name)s`` (a literal ``%`` doubled)."""
    return _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))


class PreparedStatement:
    """``lock``: an optional statement (e.g. taking an advisory lock) sent in the same round
    trip just before ``EXECUTE`` (or the plain statement). PostgreSQL runs the two as one
    implicit transaction (in autocommit mode), and the statement's snapshot is taken after
    ``lock`` returned.

    ``synchronous_commit=False``: the statement's transaction commits without waiting for its
    WAL to reach the disk (``SET LOCAL synchronous_commit TO OFF``, in the same round trip).
    Only for writes whose loss in a server crash is covered already: losing one is
    the same as the worker dying just before it, which at-least-once execution repairs. A
    later synchronous commit on the server flushes it too (the WAL is one sequence).

    ``generic_plan=True``: every ``EXECUTE`` runs on the statement's generic plan (``SET
    LOCAL plan_cache_mode``, in the same round trip). PostgreSQL plans the first five for
    their parameters, then keeps the generic plan only if it does not look dearer than
    those. Where the parameters fold a branch away (a ``CASE`` on one of them), the generic
    plan always looks dearer, and the statement is planned again at every execution: for a
    step record, about a third of its round trip.
    """

    def __init__(
        self,
        name: str,
        sql: str,
        lock: str | None = None,
        synchronous_commit: bool = True,
        generic_plan: bool = False,
    ) -> None:
        self.name = name
        self.sql = sql
        self._order: list[str] = []
        self._lock_order: list[str] = []

        def positional(match: re.Match[str]) -> str:
            param = match.group(1)
            if param not in self._order:
                self._order.append(param)
            return f"${self._order.index(param) + 1}"

        self._prepare = f"PREPARE {name} AS {_PARAM.sub(positional, sql)}"
        # sent with parameters: a literal % doubled
        self._prepare_sql = self._prepare.replace("%", "%%")
        self._execute = f"EXECUTE {name}({', '.join(['%s'] * len(self._order))})"
        if lock is not None:

            def inline(match: re.Match[str]) -> str:
                self._lock_order.append(match.group(1))
                return "%s"

            self._execute = f"{_PARAM.sub(inline, lock)}; {self._execute}"
        # The EXECUTE's placeholders: the lock statement's, then the prepared statement's.
        self._execute_order = [*self._lock_order, *self._order]
        self._plain = _pyformat(sql if lock is None else f"{lock}; {sql}")
        if generic_plan:
            self._execute = f"{_GENERIC_PLAN}; {self._execute}"
        if not synchronous_commit:
            self._execute = f"{_ASYNC_COMMIT}; {self._execute}"
            self._plain = f"{_ASYNC_COMMIT}; {self._plain}"

    @property
    def parameters(self) -> tuple[str, ...]:
        """The names of the prepared statement's parameters, in ``$1, $2, …`` order."""
        return tuple(self._order)

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> Rows:
        info = conn.connection.info
        discard = _DISCARD_PLANS if _plans_due(info) else ""
        if not conn.get_execution_options().get(PREPARE, True):
            return _run(conn, discard + self._plain, dict(params))
        # name -> True: the server holds the statement; False: making it failed, and whether
        # the server holds it is not known
        prepared: dict[str, bool] = info.setdefault("awooop_prepared", {})
        values = tuple(params[p] for p in self._execute_order)
        held = prepared.get(self.name)
        if held:
            return _run(conn, discard + self._execute, values)
        if held is False:
            _forget(conn, self.name)
        # Made in the EXECUTE's round trip and transaction: no round trip or commit of its
        # own. A PREPARE is not undone when its transaction fails.
        prepared[self.name] = False
        rows = _run(conn, f"{discard}{self._prepare_sql}; {self._execute}", values)
        prepared[self.name] = True
        return rows


def _plans_due(info: dict[str, Any]) -> bool:
    """Whether the connection should drop its session's cached plans with this statement
    (then the next time is set): see the module docstring."""
    now = _clock()
    due, interval = info.get("awooop_discard_plans", (None, 0.0))
    if due is None:
        info["awooop_discard_plans"] = (now + FIRST_REPLAN_SECONDS, FIRST_REPLAN_SECONDS)
        return False
    if now < due:
        return False
    interval = min(2 * interval, REPLAN_AFTER_SECONDS)
    info["awooop_discard_plans"] = (now + interval, interval)
    return True


def _forget(conn: Connection, name: str) -> None:
    """Drop the connection's statement ``name`` if the server holds it (looked up first, so
    that nothing fails inside a caller's transaction)."""
    held = _run(conn, "SELECT 1 FROM pg_prepared_statements WHERE name = %s", (name,))
    if held.first() is not None:
        _run(conn, f"DEALLOCATE {name}", None)


class Rows:
    """What a statement returned: its rows, as named tuples, and its row count."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def first(self) -> Any | None:
        return self._rows[0] if self._rows else None

    def scalar_one(self) -> Any:
        if not self._rows:
            raise exc.NoResultFound("No row was found when one was required")
        if len(self._rows) > 1:
            raise exc.MultipleResultsFound("Multiple rows were found when exactly one was required")
        return self._rows[0][0]


# Row classes by column names: a handful, one per statement's RETURNING list.
_ROW_TYPES: dict[tuple[str, ...], Any] = {}


def _row_type(description: Sequence[Any]) -> Any:
    # psycopg2's Column: ``column.name`` is read directly, where ``column[0]`` first builds
    # the column's 7-tuple (four times the cost, for every statement that returns rows).
    names = tuple(column.name for column in description)
    row_type = _ROW_TYPES.get(names)
    if row_type is None:
        row_type = _ROW_TYPES[names] = namedtuple("Row", names, rename=True)
    return row_type


def _run(conn: Connection, sql: str, params: Any) -> Rows:
    """``sql`` on ``conn``'s DBAPI cursor. A DBAPI error is raised as SQLAlchemy raises it
    from ``exec_driver_sql``; when the driver lost the connection, the connection is
    invalidated first (the pool opens a new one; the checkout hook in :mod:`awooop.db`
    replaces any other pooled connection the server closed).

    When something listens to SQLAlchemy's statement events (a tracer's instrumentation, a
    test injecting faults), the statement goes through SQLAlchemy instead, so they see it."""
    if conn.dispatch.before_cursor_execute or conn.dispatch.after_cursor_execute:
        result = conn.exec_driver_sql(sql, params)
        return Rows(list(result) if result.returns_rows else [], result.rowcount)
    dbapi_connection = conn.connection.dbapi_connection
    assert dbapi_connection is not None
    dialect = conn.dialect
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(sql, params)
        rows: list[Any] = []
        if cursor.description is not None:
            row_type = _row_type(cursor.description)
            rows = [row_type(*row) for row in cursor.fetchall()]
        return Rows(rows, cursor.rowcount)
    except dialect.loaded_dbapi.Error as error:
        lost = dialect.is_disconnect(error, dbapi_connection, cursor)
        if lost:
            conn.invalidate(error)
        raise exc.DBAPIError.instance(
            sql,
            params,
            error,
            dialect.loaded_dbapi.Error,
            dialect=dialect,
            connection_invalidated=lost,
        ) from error
    finally:
        if not cursor.closed:
            cursor.close()
