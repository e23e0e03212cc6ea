"""Hot statements prepared once per database connection.

PostgreSQL plans a statement every time it is sent as text; for the data-modifying CTEs on
the hot paths (admission, claim, step record, finish, renew) planning is about a third of
their cost. psycopg2 has no server-side prepared statements of its own, so a
:class:`PreparedStatement` sends ``PREPARE name AS …`` the first time a pooled connection
runs it, then ``EXECUTE name(…)``. The SQL stays written once, with ``:name`` parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, CursorResult

_PARAM = re.compile(r"(?<![:\w]):(\w+)")


class PreparedStatement:
    """``lock``: an optional statement (e.g. taking an advisory lock) sent in the same round
    trip just before ``EXECUTE``. PostgreSQL runs the two as one implicit transaction (in
    autocommit mode), and the prepared statement's snapshot is taken after ``lock`` returned.
    """

    def __init__(self, name: str, sql: str, lock: str | None = None) -> None:
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
        self._execute = f"EXECUTE {name}({', '.join(['%s'] * len(self._order))})"
        if lock is not None:

            def inline(match: re.Match[str]) -> str:
                self._lock_order.append(match.group(1))
                return "%s"

            self._execute = f"{_PARAM.sub(inline, lock)}; {self._execute}"

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> CursorResult[Any]:
        prepared: set[str] = conn.connection.info.setdefault("awooop_prepared", set())
        if self.name not in prepared:
            conn.exec_driver_sql(self._prepare)
            prepared.add(self.name)
        values = [params[p] for p in self._lock_order] + [params[p] for p in self._order]
        return conn.exec_driver_sql(self._execute, tuple(values))
