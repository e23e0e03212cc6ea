"""Reading what the tests assert on, straight from the tables."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from tests.support.waiting import until

TABLES = ("awooop_channel_event_dedupe", "awooop_run_state", "awooop_run_event")


def count(engine: Engine, table: str, where: str = "TRUE", **params: object) -> int:
    with engine.connect() as conn:
        return conn.execute(
            text(f"SELECT count(*) FROM {table} WHERE {where}"), params
        ).scalar_one()


def row_counts(engine: Engine) -> dict[str, int]:
    return {table: count(engine, table) for table in TABLES}


def run(engine: Engine, run_id: object) -> dict:
    with engine.connect() as conn:
        return dict(
            conn.execute(text("SELECT * FROM awooop_run_state WHERE run_id = :r"), {"r": run_id})
            .mappings()
            .one()
        )


def events(engine: Engine, run_id: object) -> list[dict]:
    with engine.connect() as conn:
        return [
            dict(r)
            for r in conn.execute(
                text("SELECT * FROM awooop_run_event WHERE run_id = :r ORDER BY seq"), {"r": run_id}
            ).mappings()
        ]


def rows(engine: Engine, sql: str, **params: object) -> list[dict]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(text(sql), params).mappings()]


def execute(engine: Engine, sql: str, **params: object) -> None:
    """One statement in a transaction of its own (a test's setup or its clock moves)."""
    with engine.begin() as conn:
        conn.execute(text(sql), params)


def set_run(engine: Engine, run_id: object, **columns: object) -> None:
    """Set columns of a run row directly (a state no code path makes on demand)."""
    assignments = ", ".join(f"{name} = :{name}" for name in columns)
    execute(
        engine,
        f"UPDATE awooop_run_state SET {assignments} WHERE run_id = :run_id",
        run_id=run_id,
        **columns,
    )


def terminate_backend(engine: Engine, pid: int) -> None:
    """End server session ``pid`` of ``engine``'s database, from a connection of its own, and
    wait until the backend is gone."""
    admin = create_engine(engine.url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            until(
                lambda: (
                    not conn.execute(
                        text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}
                    ).scalar_one()
                ),
                10,
                "the backend to exit",
            )
    finally:
        admin.dispose()


def allow_workflows(
    engine: Engine, project_id: str, *workflows: str, max_active_runs: int | None = None
) -> None:
    """Set the project's ``allowed_workflows`` (and its active-run quota, or none)."""
    import json

    limits = {} if max_active_runs is None else {"max_active_runs": max_active_runs}
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE awooop_project SET allowed_workflows = CAST(:w AS jsonb),"
                " limits = CAST(:l AS jsonb) WHERE project_id = :p"
            ),
            {"w": json.dumps(list(workflows)), "l": json.dumps(limits), "p": project_id},
        )
