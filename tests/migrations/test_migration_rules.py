"""Rules every migration keeps, read from the SQL Alembic emits for it (offline, ``--sql``):
a rolling upgrade runs each migration while the previous release serves (docs/upgrading.md).

- An index on a table the migration did not create is built ``CONCURRENTLY``, outside any
  transaction (a plain CREATE INDEX holds a SHARE lock on the table for the whole build:
  every admission waits); its downgrade drops it likewise.
- A migration only adds: no table or column dropped or renamed, no type changed, no NOT NULL
  set, no NOT NULL column without a default (the previous release writes rows without it) —
  except the contract migrations listed here, each after no process of the release that used
  the thing runs.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from tests.conftest import ROOT

# Contract migrations: revision -> what it removes and why that was safe when it shipped.
CONTRACTS = {
    # Shipped before releases were tagged; the release it came with stopped writing the
    # column, but the one before still wrote it (a rolling upgrade from that release broke the
    # old timer sweep until its processes stopped). A new contract ships a release later.
    "0007": "DROP COLUMN fencing_token",
}

_STATEMENT_END = re.compile(r";\s*$", re.M)
_CREATE_TABLE = re.compile(r"^CREATE TABLE (\w+)", re.I)
_DROP_TABLE = re.compile(r"^DROP TABLE (\w+)", re.I)
_CREATE_INDEX = re.compile(
    r"^CREATE (?:UNIQUE )?INDEX (CONCURRENTLY )?(?:IF NOT EXISTS )?\w+ ON (\w+)", re.I
)
_DROP_INDEX = re.compile(r"^DROP INDEX (CONCURRENTLY )?(?:IF EXISTS )?(\w+)", re.I)
_CONTRACTING = re.compile(
    r"DROP COLUMN|DROP TABLE|RENAME |ALTER COLUMN \w+ (?:SET DATA )?TYPE|SET NOT NULL", re.I
)
_ADD_NOT_NULL = re.compile(r"ADD COLUMN (?:(?!ADD COLUMN).)*NOT NULL", re.I | re.S)


@dataclass
class Step:
    revision: str
    direction: str
    sql: str


def offline_sql(start: str | None, end: str, direction: str) -> str:
    config = Config(str(ROOT / "alembic.ini"))
    buffer = io.StringIO()
    config.output_buffer = buffer
    config.attributes["url"] = "postgresql+psycopg2://offline@localhost/offline"
    span = f"{start or 'base'}:{end}"
    getattr(command, direction)(config, span, sql=True)
    return buffer.getvalue()


def steps() -> list[Step]:
    script = ScriptDirectory.from_config(Config(str(ROOT / "alembic.ini")))
    found = []
    for revision in reversed(list(script.walk_revisions())):
        prev = revision.down_revision
        assert prev is None or isinstance(prev, str), "the history is linear"
        found.append(
            Step(revision.revision, "upgrade", offline_sql(prev, revision.revision, "upgrade"))
        )
        found.append(
            Step(
                revision.revision,
                "downgrade",
                offline_sql(revision.revision, prev or "base", "downgrade"),
            )
        )
    return found


def statements(sql: str) -> list[str]:
    lines = [line for line in sql.splitlines() if not line.startswith("--")]
    return [" ".join(s.split()) for s in _STATEMENT_END.split("\n".join(lines)) if s.strip()]


def index_problems(sql: str) -> list[str]:
    """What in one migration's SQL builds or drops an index on an existing table while
    holding it against writers."""
    problems = []
    created: set[str] = set()
    dropped: set[str] = set()
    in_transaction = False
    for statement in statements(sql):
        upper = statement.upper()
        if upper == "BEGIN":
            in_transaction = True
        elif upper == "COMMIT":
            in_transaction = False
        elif match := _CREATE_TABLE.match(statement):
            created.add(match.group(1))
        elif match := _DROP_TABLE.match(statement):
            dropped.add(match.group(1))
        elif match := _CREATE_INDEX.match(statement):
            concurrently, table = match.groups()
            if table in created:
                continue
            if not concurrently or in_transaction:
                problems.append(f"not CONCURRENTLY outside a transaction: {statement[:120]}")
        elif match := _DROP_INDEX.match(statement):
            concurrently, _ = match.groups()
            # Dropping an index with its table (a downgrade) comes before the DROP TABLE.
            if not concurrently or in_transaction:
                problems.append(f"not CONCURRENTLY outside a transaction: {statement[:120]}")
    return [p for p in problems if not any(f" ON {t} " in p for t in dropped)]


def contracting_statements(sql: str) -> list[str]:
    found = []
    for statement in statements(sql):
        adds_not_null = bool(_ADD_NOT_NULL.search(statement))
        if _CONTRACTING.search(statement) or (adds_not_null and " DEFAULT " not in statement):
            found.append(statement)
    return found


ALL_STEPS = steps()


@pytest.mark.parametrize(
    "step", [s for s in ALL_STEPS if s.direction == "upgrade"], ids=lambda s: s.revision
)
def test_an_upgrade_builds_indexes_on_existing_tables_concurrently(step):
    assert index_problems(step.sql) == []


@pytest.mark.parametrize(
    "step", [s for s in ALL_STEPS if s.direction == "downgrade"], ids=lambda s: s.revision
)
def test_a_downgrade_drops_indexes_of_kept_tables_concurrently(step):
    sql = step.sql
    # DROP INDEX names no table: the indexes of tables this downgrade drops are left out by
    # name (they go with their table).
    dropped_tables = {m.group(1) for s in statements(sql) if (m := _DROP_TABLE.match(s))}
    upgrade = next(s for s in ALL_STEPS if s.revision == step.revision and s.direction == "upgrade")
    indexes_of_dropped = {
        m.group(1)
        for s in statements(upgrade.sql)
        if (
            m := re.match(
                r"^CREATE (?:UNIQUE )?INDEX (?:CONCURRENTLY )?(?:IF NOT EXISTS )?(\w+) ON (\w+)", s
            )
        )
        and m.group(2) in dropped_tables
    }
    problems = [p for p in index_problems(sql) if not any(f" {i}" in p for i in indexes_of_dropped)]
    assert problems == []


@pytest.mark.parametrize(
    "step", [s for s in ALL_STEPS if s.direction == "upgrade"], ids=lambda s: s.revision
)
def test_an_upgrade_only_adds_unless_it_is_a_listed_contract(step):
    found = contracting_statements(step.sql)
    if step.revision in CONTRACTS:
        assert found and all(CONTRACTS[step.revision] in s for s in found), found
    else:
        assert found == []


def test_the_rules_catch_a_plain_index_on_an_existing_table_and_a_drop():
    plain = "BEGIN;\nCREATE INDEX ix_x ON awooop_run_state (status);\nCOMMIT;\n"
    inside = "BEGIN;\nCREATE INDEX CONCURRENTLY ix_x ON awooop_run_state (status);\nCOMMIT;\n"
    outside = "BEGIN;\nCOMMIT;\nCREATE INDEX CONCURRENTLY ix_x ON awooop_run_state (status);\n"
    new_table = (
        "BEGIN;\nCREATE TABLE awooop_new (a int);\nCREATE INDEX ix_n ON awooop_new (a);\nCOMMIT;\n"
    )

    assert len(index_problems(plain)) == 1
    assert len(index_problems(inside)) == 1
    assert index_problems(outside) == []
    assert index_problems(new_table) == []
    assert contracting_statements("ALTER TABLE awooop_timer DROP COLUMN kind;")
    assert contracting_statements("ALTER TABLE awooop_run_state ADD COLUMN x INTEGER NOT NULL;")
    assert not contracting_statements(
        "ALTER TABLE awooop_run_state ADD COLUMN x INTEGER DEFAULT '0' NOT NULL;"
    )
    assert not contracting_statements("ALTER TABLE awooop_run_state ADD COLUMN x INTEGER;")
