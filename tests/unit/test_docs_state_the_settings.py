"""What README.md and docs/*.md state about a setting's default, interval or limit agrees with
``Settings()``: the forms a statement is recognised in, and what disagreeing means, are in
:mod:`tests.support.doc_settings`. Each page is its own case, so a failure names the page,
and each line of its message a statement (file:line) and what the code has."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import doc_settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_the_page_states_the_settings_as_the_code_has_them(page):
    found = doc_settings.problems(page)

    assert found == [], "stated otherwise than in awooop/config.py:\n" + "\n".join(found)


# --- What the check recognises ----------------------------------------------------------------


def found(tmp_path, text: str) -> list[str]:
    page = tmp_path / "page.md"
    page.write_text(text)
    return doc_settings.problems(page)


def test_a_variable_with_its_value_in_parentheses_is_checked(tmp_path):
    assert found(tmp_path, "every `AWOOOP_PRUNE_INTERVAL_SECONDS` (300) in batches\n") == []
    assert found(tmp_path, "`AWOOOP_STEP_TIMEOUT_SECONDS` (15 min): past it\n") == []
    assert found(tmp_path, "`AWOOOP_RERUN_RATE_PER_SECOND` (5 a second by default)\n") == []
    [wrong] = found(tmp_path, "one\nevery `AWOOOP_PRUNE_INTERVAL_SECONDS` (3600) in batches\n")

    assert wrong.startswith("page.md:2: ")
    assert "AWOOOP_PRUNE_INTERVAL_SECONDS is 300" in wrong


def test_a_value_inside_the_variables_parenthesis_or_before_it_is_checked(tmp_path):
    assert found(tmp_path, "its leases expire (`AWOOOP_LEASE_TTL_SECONDS`, 5 min)\n") == []
    assert found(tmp_path, "not seen for an hour (`AWOOOP_WORKER_PRUNE_AFTER_SECONDS`)\n") == []
    assert found(tmp_path, "The one-minute reaper pass (`AWOOOP_REAPER_INTERVAL_SECONDS`)\n") == []

    assert found(tmp_path, "its leases expire (`AWOOOP_LEASE_TTL_SECONDS`, 10 min)\n")
    assert found(tmp_path, "not seen for a day (`AWOOOP_WORKER_PRUNE_AFTER_SECONDS`)\n")
    assert found(tmp_path, "The five-minute reaper pass (`AWOOOP_REAPER_INTERVAL_SECONDS`)\n")


def test_examples_that_set_a_variable_and_values_that_are_no_default_are_left_alone(tmp_path):
    text = (
        "```sh\nAWOOOP_LEASE_TTL_SECONDS=30 make chaos\n```\n"
        "`AWOOOP_LEASE_TTL_SECONDS=30`, `AWOOOP_HEARTBEAT_INTERVAL_SECONDS=3`\n"
        "(`AWOOOP_RATE_LIMIT_REDIS_URL`, default the broker)\n"
        "`AWOOOP_WORKER_DEAD_AFTER_SECONDS − AWOOOP_WORKER_BELIEF_MARGIN_SECONDS` (15 s)\n"
        "`AWOOOP_DB_LOCK_TIMEOUT_WORKER_SECONDS` (5 × 10 s = 50 s by default)\n"
    )

    assert found(tmp_path, text) == []


def test_a_sweep_named_without_its_variable_is_checked_against_its_interval(tmp_path):
    diagram = "beat ──▶ maintenance queue: reap (60 s) · due timers (2 s) · prune dedupe (5 min)\n"
    assert found(tmp_path, diagram) == []

    [wrong] = found(tmp_path, diagram.replace("(5 min)", "(1 h)"))
    assert "'prune dedupe (1 h)': AWOOOP_PRUNE_INTERVAL_SECONDS is 300" in wrong
    [hourly] = found(tmp_path, "as above, for the hourly prune: the table grows\n")
    assert "AWOOOP_PRUNE_INTERVAL_SECONDS is 300" in hourly


TABLE = """\
| variable | default | meaning |
|---|---|---|
| `AWOOOP_ORPHAN_AFTER_SECONDS` / `_INTERVAL_SECONDS` / `_BATCH_SIZE` | {orphans} | orphans |
| `AWOOOP_DB_STATEMENT_TIMEOUT_<ROLE>_SECONDS` | web 15, worker {worker}, keeper 5, sweeps 60 | x |
| `AWOOOP_LOG_LEVEL` | {level} | log lines |
| `AWOOOP_RATE_LIMIT_REDIS_URL` | the broker URL | windows |
"""


def test_a_tables_default_column_is_checked_variable_by_variable(tmp_path):
    right = {"orphans": "120 / 30 / 500", "worker": 30, "level": "INFO"}
    assert found(tmp_path, TABLE.format(**right)) == []

    [orphan] = found(tmp_path, TABLE.format(**{**right, "orphans": "120 / 60 / 500"}))
    assert orphan.startswith("page.md:3: AWOOOP_ORPHAN_INTERVAL_SECONDS | 60 |")
    [role] = found(tmp_path, TABLE.format(**{**right, "worker": 45}))
    assert "AWOOOP_DB_STATEMENT_TIMEOUT_WORKER_SECONDS is 30" in role
    [level] = found(tmp_path, TABLE.format(**{**right, "level": "DEBUG"}))
    assert "AWOOOP_LOG_LEVEL is INFO" in level


def test_a_setting_given_two_rows_in_one_page_is_reported(tmp_path):
    table = (
        "| variable | default | meaning |\n|---|---|---|\n"
        "| `AWOOOP_BEAT_SCHEDULE_FILE` | `.awooop/celerybeat-schedule` in the checkout | a |\n"
        "| `AWOOOP_ACCESS_LOG` | true | b |\n"
        "| `AWOOOP_BEAT_SCHEDULE_FILE` | `.awooop/celerybeat-schedule` | c |\n"
    )

    [twice] = found(tmp_path, table)

    assert twice == "page.md:5: AWOOOP_BEAT_SCHEDULE_FILE has a row at lines [3, 5]: keep one"


def test_a_dead_worker_said_to_keep_its_runs_for_the_lease_is_reported(tmp_path):
    row = (
        "| `worker` | many | killing one loses nothing (its runs are reaped after "
        "`AWOOOP_LEASE_TTL_SECONDS`) |\n"
    )
    runbook = (
        "**A worker host died.** Nothing to do: its leases expire\n"
        "(`AWOOOP_LEASE_TTL_SECONDS`, 5 min), the reaper puts the runs back.\n"
    )
    right = (
        "**A worker host died.** Its runs move on once the reaper has seen its liveness row\n"
        "unchanged for `AWOOOP_WORKER_DEAD_AFTER_SECONDS`, before `AWOOOP_LEASE_TTL_SECONDS`.\n"
    )

    assert "wait for AWOOOP_LEASE_TTL_SECONDS" in found(tmp_path, row)[0]
    assert found(tmp_path, runbook)[0].startswith("page.md:1: a dead worker's runs wait")
    assert found(tmp_path, right) == []


def test_a_dead_workers_takeover_time_must_be_the_one_the_defaults_give(tmp_path):
    said = "A killed worker's run is running on another worker after at most about {} s.\n"

    assert found(tmp_path, said.format(41)) == []
    [wrong] = found(tmp_path, said.format(80))
    assert "'about 80 s': the reaper hands a dead worker's runs on within 40 s" in wrong
    assert found(tmp_path, "A killed worker's run moves on, ≈ 25 s later.\n")
    assert found(tmp_path, "The reaper hands it on within 80 s of its last liveness beat.\n")
