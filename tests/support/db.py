"""Reading what the tests assert on, straight from the tables."""

from __future__ import annotations

from sqlalchemy import Engine, text

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
