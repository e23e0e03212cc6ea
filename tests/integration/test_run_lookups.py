"""A statement that names its row — a run, an approval, an outbox message, a timer — reads
that row by its key: however many rows share the status it asks for, and whatever the
statistics say about how many do.

The statistics a plan is made from are often stale for what is unfinished: analyzed while few
runs were running or waiting and few messages were unsent, or counting a few hundred among a
million finished ones. A plan made from them can read the named row through an index on
``status`` (or on pending rows alone) and filter every other row in that status out: a cost
that grows with the runs in flight, the approvals waiting for a person, the tool results
awaited, the runs held, the messages waiting for a chat provider that is down.

The statements are found, not listed: every SQL text of the store that reads one of these
tables and takes the id that names a row of it. A new one is checked without being named
here."""

from __future__ import annotations

import importlib
import pkgutil
import uuid
from collections.abc import Iterator

from sqlalchemy import TextClause, text

import awooop.store
from awooop.domain import states
from tests.support import plans

# Each table, with the binds that name one row of it (a run by its id, or through its
# approval), and the column a scan that filters for that row compares.
NAMING = {
    "awooop_run_state": (("run_id", "approval_id"), "run_id"),
    "awooop_approval": (("approval_id",), "approval_id"),
    "awooop_outbox": (("message_id",), "message_id"),
    "awooop_timer": (("timer_id",), "timer_id"),
}


def statements_naming_one_row() -> Iterator[tuple[str, TextClause]]:
    for found in pkgutil.iter_modules(awooop.store.__path__):
        module = importlib.import_module(f"awooop.store.{found.name}")
        for name, value in vars(module).items():
            clauses = value.items() if isinstance(value, dict) else [("", value)]
            for key, clause in clauses:
                if isinstance(clause, TextClause) and any(
                    table in clause.text and any(bind in clause._bindparams for bind in binds)
                    for table, (binds, _) in NAMING.items()
                ):
                    yield f"{found.name}.{name}{f'[{key}]' if key else ''}", clause


def scans_filtering_for_a_row(plan: str) -> list[str]:
    """The scans in ``plan`` that find a named row by filtering on its id."""
    found, scan, column = [], None, None
    for line in plan.splitlines():
        table = next((t for t in NAMING if "Scan" in line and f" on {t} " in line), None)
        if table is not None:
            scan, column = line.strip(), NAMING[table][1]
        elif "->" in line:
            scan = None
        elif scan is not None and "Filter:" in line and f"{column} = " in line:
            found.append(f"{scan}  {line.strip()}")
    return found


# Rows of the other tables for one run: ``n`` approvals, outbox messages and timers in
# the given status (each approval with its own token, each timer with its own id).
_ROWS_OF_A_RUN = [
    """
    INSERT INTO awooop_approval
        (token_hash, project_id, run_id, step, action, approvers, status, expires_at)
    SELECT md5(random()::text) || md5(random()::text), :project_id, :run_id, 'approve',
           'restart', '{}'::jsonb, :approval, now() + interval '1 hour'
    FROM generate_series(1, :n)
    """,
    """
    INSERT INTO awooop_outbox
        (project_id, run_id, channel, purpose, payload, status, next_attempt_at)
    SELECT :project_id, :run_id, 'telegram', 'report', '{}'::jsonb, :message,
           now() - interval '1 minute'
    FROM generate_series(1, :n)
    """,
    """
    INSERT INTO awooop_timer (timer_id, run_id, kind, due_at, expected_version, state)
    SELECT gen_random_uuid()::text, :run_id, 'retry', now() - interval '1 minute', 1, :timer
    FROM generate_series(1, :n)
    """,
]


def add_rows_of_a_run(engine, project_id, run_id, n, approval, message, timer) -> None:
    values = {"project_id": project_id, "run_id": run_id, "n": n}
    values.update(approval=approval, message=message, timer=timer)
    with engine.begin() as conn:
        for statement in _ROWS_OF_A_RUN:
            conn.execute(text(statement), values)


def test_every_statement_that_names_a_row_reads_it_by_its_key(engine, project):
    # Given 20,000 finished runs, with as many decided approvals, sent messages and fired
    # timers, analyzed at a quiet moment (nothing unfinished), then 600 runs in each
    # unfinished status, 600 waiting for an intervention, 600 pending approvals, 600
    # messages waiting to be sent and 600 parked, and 600 pending timers, all uncounted by
    # the statistics
    project_id = project["project_id"]
    run_id = plans.finished_runs(engine, project_id, 20_000)
    add_rows_of_a_run(engine, project_id, run_id, 20_000, "APPROVED", "SENT", "FIRED")
    plans.freeze_statistics(engine, NAMING)
    plans.copy_run(engine, run_id, states.UNFINISHED_STATUSES, 600)
    plans.copy_run(engine, run_id, ["WAITING_APPROVAL"], 600, saga_status="MANUAL_INTERVENTION")
    add_rows_of_a_run(engine, project_id, run_id, 600, "PENDING", "PENDING", "PENDING")
    add_rows_of_a_run(engine, project_id, run_id, 600, "EXPIRED", "PARKED", "SKIPPED")
    named = dict(statements_naming_one_row())
    assert len(named) >= 25, sorted(named)  # the search finds the store's statements

    # When each is planned for that row
    filtering = {}
    with engine.connect() as conn:
        for name, statement in named.items():
            values = {
                bind: str(uuid.uuid4()) if bind.endswith("_id") else "1"
                for bind in statement._bindparams
            }
            values.update(run_id=str(run_id), project_id=project_id)
            found = scans_filtering_for_a_row(plans.custom_plan(conn, statement, values))
            if found:
                filtering[name] = found

    # Then none finds its row by filtering others out
    assert not filtering, "\n".join(f"{name}: {scans}" for name, scans in filtering.items())
