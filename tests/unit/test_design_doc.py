"""docs/design.md is true to the code: its transition tables are those of
:mod:`awooop.domain.states`, every setting it names exists and shows its default, and its sweeps
table lists every task beat sends, on the interval beat sends it at."""

from __future__ import annotations

import re
from pathlib import Path

from awooop import config
from awooop.domain import states

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "design.md").read_text()

# `AWOOOP_X` (300 s), `AWOOOP_X` = 2 s, `AWOOOP_X` (7 days), `AWOOOP_X` (500)
SETTING_WITH_VALUE = re.compile(r"`(AWOOOP_[A-Z_]+)` (?:\(|= )([\d,.]+)(?: (s|days)\b)?")
UNIT_SECONDS = {None: 1, "s": 1, "days": 24 * 3600}


def section(title: str) -> str:
    return DOC.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def transition_tables() -> list[dict[str, frozenset[str]]]:
    """The ``| from | to |`` tables of the state section, in order."""
    tables: list[dict[str, frozenset[str]]] = []
    for block in re.findall(
        r"\| from \| to \|\n\|---\|---\|\n((?:\|.*\|\n)+)", section("The two axes of a run's state")
    ):
        table = {}
        for row in block.splitlines():
            source, targets = (cell.strip() for cell in row.strip("|").split("|"))
            moves = [] if targets == "(terminal)" else targets.split(", ")
            table[source] = frozenset(moves)
        tables.append(table)
    return tables


def test_the_run_status_table_is_the_code_s():
    run_status, _ = transition_tables()

    assert run_status == states.ALLOWED_TRANSITIONS


def test_the_saga_status_table_is_the_code_s():
    _, saga_status = transition_tables()

    assert saga_status == states.ALLOWED_SAGA_TRANSITIONS


def test_every_setting_named_exists_and_every_value_shown_is_its_default():
    named = set(re.findall(r"`(AWOOOP_[A-Z_]+)`", DOC))
    shown = SETTING_WITH_VALUE.findall(DOC)
    defaults = config.Settings()

    assert named and sorted(named - config.SETTING_VARIABLES) == []
    assert len(shown) > 20
    for name, value, unit in shown:
        default = getattr(defaults, name.removeprefix("AWOOOP_").lower())
        in_seconds = name.endswith("_SECONDS")
        expected = default / UNIT_SECONDS[unit or None] if in_seconds else default
        assert float(value.replace(",", "")) == expected, f"{name}: {value} {unit or ''}"


def test_the_sweeps_table_lists_every_beat_task_at_its_interval():
    schedule = (ROOT / "celeryconfig.py").read_text()
    entries = re.findall(
        r'"task": "(awooop\.sweeps\.\w+)",\s*"schedule": _settings\.(\w+),', schedule
    )
    rows = {
        task: every
        for task, every in re.findall(
            r"^\| [^|]*\(`(awooop\.sweeps\.\w+)`\) \| `(AWOOOP_[A-Z_]+)` = ",
            section("The processes and what each runs"),
            re.M,
        )
    }

    assert len(entries) >= 8
    assert rows == {task: config.variable(setting) for task, setting in entries}
