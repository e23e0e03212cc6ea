"""A statement that names its run reads that run by its primary key: however many runs share
the status it asks for, and whatever the statistics say about how many do.

The statistics a plan is made from are often stale for unfinished runs: analyzed while few
were running or waiting, or counting a few hundred among a million finished ones. A plan
made from them can read the named run through an index on ``status`` (or on running runs
alone) and filter every other run in that status out: a cost that grows with the runs in
flight, the approvals waiting for a person, the tool results awaited, the runs held.

The statements are found, not listed: every SQL text of the store that reads the runs table
and takes a run id or an approval id. A new one is checked without being named here."""

from __future__ import annotations

import importlib
import pkgutil
import uuid
from collections.abc import Iterator

from sqlalchemy import TextClause, text

import awooop.store
from awooop.domain import states
from tests.support import plans
from tests.support import runs as test_runs

# The binds that name one run: by its id, or through its approval.
NAMING = ("run_id", "approval_id")


def statements_naming_one_run() -> Iterator[tuple[str, TextClause]]:
    for found in pkgutil.iter_modules(awooop.store.__path__):
        module = importlib.import_module(f"awooop.store.{found.name}")
        for name, value in vars(module).items():
            clauses = value.items() if isinstance(value, dict) else [("", value)]
            for key, clause in clauses:
                if (
                    isinstance(clause, TextClause)
                    and "awooop_run_state" in clause.text
                    and any(bind in clause._bindparams for bind in NAMING)
                ):
                    yield f"{found.name}.{name}{f'[{key}]' if key else ''}", clause


def scans_filtering_for_a_run(plan: str) -> list[str]:
    """The scans of the runs table in ``plan`` that find a run by filtering on its id."""
    found, scan = [], None
    for line in plan.splitlines():
        if "Scan" in line and " on awooop_run_state" in line:
            scan = line.strip()
        elif "->" in line:
            scan = None
        elif scan is not None and "Filter:" in line and "run_id = " in line:
            found.append(f"{scan}  {line.strip()}")
    return found


def test_every_statement_that_names_a_run_reads_it_by_its_primary_key(engine, project):
    # Given 20,000 finished runs, analyzed at a quiet moment (none unfinished), then 600
    # runs in each unfinished status and 600 waiting for an intervention, all uncounted by
    # the statistics
    admitted = test_runs.admit(engine, project["project_id"])
    plans.copy_run(engine, admitted, ["COMPLETED"], 20_000, saga_status="COMPLETED")
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM awooop_run_state WHERE run_id = :r"), {"r": admitted})
        run_id = conn.execute(text("SELECT run_id FROM awooop_run_state LIMIT 1")).scalar_one()
    plans.freeze_statistics(engine)
    plans.copy_run(engine, run_id, states.UNFINISHED_STATUSES, 600)
    plans.copy_run(engine, run_id, ["WAITING_APPROVAL"], 600, saga_status="MANUAL_INTERVENTION")
    named = dict(statements_naming_one_run())
    assert len(named) >= 20, sorted(named)  # the search finds the store's statements

    # When each is planned for that run
    filtering = {}
    with engine.connect() as conn:
        for name, statement in named.items():
            values = {
                bind: str(uuid.uuid4()) if bind.endswith("_id") else "1"
                for bind in statement._bindparams
            }
            values.update(run_id=str(run_id), project_id=project["project_id"])
            found = scans_filtering_for_a_run(plans.custom_plan(conn, statement, values))
            if found:
                filtering[name] = found

    # Then none finds its run by filtering others out
    assert not filtering, "\n".join(f"{name}: {scans}" for name, scans in filtering.items())
