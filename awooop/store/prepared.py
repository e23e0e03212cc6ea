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
    def __init__(self, name: str, sql: str) -> None:
        self.name = name
        self.sql = sql
        self._order: list[str] = []

        def positional(match: re.Match[str]) -> str:
            param = match.group(1)
            if param not in self._order:
                self._order.append(param)
            return f"${self._order.index(param) + 1}"

        self._prepare = f"PREPARE {name} AS {_PARAM.sub(positional, sql)}"
        self._execute = f"EXECUTE {name}({', '.join(['%s'] * len(self._order))})"

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> CursorResult[Any]:
        prepared: set[str] = conn.connection.info.setdefault("awooop_prepared", set())
        if self.name not in prepared:
            conn.exec_driver_sql(self._prepare)
            prepared.add(self.name)
        return conn.exec_driver_sql(self._execute, tuple(params[p] for p in self._order))
