"""What a page of the docs states about a setting's value, checked against ``Settings()``.

:func:`problems` reads a Markdown page and returns one line per statement that disagrees
with the code. A statement is one of these forms (code blocks are read too: an example
that *sets* a variable, ``AWOOOP_X=5``, is in none of them):

- a variable, then its value in parentheses: "`AWOOOP_PRUNE_INTERVAL_SECONDS` (300)",
  "(5 s)", "(15 min)", "(default 300)", "(5 a second by default)";
- a variable and its value in one parenthesis: "(`AWOOOP_LEASE_TTL_SECONDS`, 5 min)";
- a duration, then the variable in parentheses: "for an hour (`AWOOOP_…`)", "the one-minute
  reaper pass (`AWOOOP_REAPER_INTERVAL_SECONDS`)";
- "`AWOOOP_X` defaults to V";
- a table with a "default" column: the variables of a row's first cell ("`A` / `_B`" with a
  suffix standing for the name before it with its ending replaced; "`…_<ROLE>_…`" with
  "web 15, worker 30") against the default cell's values, split on " / ". A variable given
  a row in two tables of a page is reported: two rows drift apart;
- a sweep named without its variable, with its interval: "prune dedupe (1 h)", "reap (60 s)",
  "the hourly prune" (:data:`SWEEPS`);
- a dead worker: a paragraph, list item or table cell where something dies (dies, died,
  dead, killed, killing) which names ``AWOOOP_LEASE_TTL_SECONDS`` but not
  ``AWOOOP_WORKER_DEAD_AFTER_SECONDS`` says a dead worker's runs wait for the lease — since
  workers beat liveness rows they wait much less —; and a time that such a block about a
  worker, or one counting from a "liveness beat", states as "about N s", "within N s" or
  "≈ N s" must be :func:`awooop.domain.timing.takeover_within` of the defaults (up to
  :data:`CLAIM_SECONDS` more: the claim).

A value is a number with an optional unit (ms, s, min, h, days, KiB, MiB, "a second"), a
number in words ("an hour", "five minutes"), a boolean, or the default itself of a text
setting with a literal one. Anything else ("the broker URL", "embedded in development")
states nothing that can be checked, and is left alone.
"""

from __future__ import annotations

import math
import re
from dataclasses import Field, fields
from pathlib import Path

from awooop import config_checks
from awooop.config import Settings, variable
from awooop.domain import timing

DEFAULTS = Settings()
FIELDS: dict[str, Field[object]] = {variable(f.name): f for f in fields(Settings)}

# How the docs name a sweep without its variable: the setting of its interval.
SWEEPS = {
    "reap": "reaper_interval_seconds",
    "reaper pass": "reaper_interval_seconds",
    "watch pass": "worker_watch_interval_seconds",
    "due timers": "timer_interval_seconds",
    "resend orphans": "orphan_interval_seconds",
    "prune dedupe": "prune_interval_seconds",
    "dedupe prune": "prune_interval_seconds",
    "prune": "prune_interval_seconds",
    "retention sweep": "retention_interval_seconds",
}
# A dead worker's run is claimed within moments of being handed back: a takeover time stated
# may exceed the bound by this much.
CLAIM_SECONDS = 2.0

_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "ten": 10,
    "fifteen": 15,
    "twenty": 20,
    "thirty": 30,
}
_SECONDS = {"ms": 0.001, "s": 1, "second": 1, "seconds": 1, "min": 60, "minute": 60}
_SECONDS |= {"minutes": 60, "h": 3600, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400}
_BYTES = {"KiB": 1024, "MiB": 1024 * 1024}
_NUMBER = r"\d[\d,]*(?:\.\d+)?|" + "|".join(sorted(_WORDS, key=len, reverse=True))
_UNIT = "|".join(sorted([*_SECONDS, *_BYTES, "a second"], key=len, reverse=True))
# A value at the start of a text, and what may follow it there.
_VALUE = re.compile(
    rf"(?:default\s+)?(?:(?P<number>{_NUMBER})(?:[\s-](?P<unit>{_UNIT}))?|"
    r"(?P<word>true|false|yes|no|on|off)|`(?P<code>[^`]+)`|(?P<bare>[\w.:/-]+))"
    r"(?=$|[,;:.)]|\s+by default|\s+\(|\s+\|)",
    re.I,
)
_VAR = r"AWOOOP_[A-Z0-9_]+"
_AFTER_VARIABLE = re.compile(rf"`(?P<var>{_VAR})`\**\s+\((?P<value>[^()]*)\)")
_IN_PARENTHESIS = re.compile(rf"`(?P<var>{_VAR})`,\s+(?P<value>[^(),;]*)\)")
_BEFORE_VARIABLE = re.compile(
    rf"\b(?P<value>(?:{_NUMBER})(?:\s+(?:{_UNIT})\b|-(?:{_UNIT})(?:\s+[a-z']+){{0,2}}))"
    rf"\s+\(`(?P<var>{_VAR})`\)",
    re.I,
)
_DEFAULTS_TO = re.compile(rf"`(?P<var>{_VAR})`\s+defaults\s+to\s+(?P<value>`[^`]+`|\S+)")
_PHRASES = "|".join(sorted(map(re.escape, SWEEPS), key=len, reverse=True))
_SWEEP_VALUE = re.compile(rf"\b(?P<phrase>{_PHRASES})\s+\((?:every\s+)?(?P<value>[^()]*)\)")
_OFTEN = {"hourly": "1 h", "daily": "1 day"}
_SWEEP_OFTEN = re.compile(
    rf"\b(?P<value>hourly|daily|(?:{_NUMBER})-(?:{_UNIT}))\s+(?P<phrase>{_PHRASES})\b", re.I
)
_DIES = re.compile(r"\b(?:dies|died|dead|killed|killing)\b")
_ABOUT = re.compile(r"(?:about|within|≈)\s*(?P<seconds>\d+(?:\.\d+)?)\s*s\b")


def problems(path: Path) -> list[str]:
    """Every statement of ``path`` that disagrees with the settings, as ``file:line: …``."""
    text = path.read_text()
    found: list[tuple[int, str]] = []
    for pattern in (_AFTER_VARIABLE, _IN_PARENTHESIS, _BEFORE_VARIABLE, _DEFAULTS_TO):
        for m in pattern.finditer(text):
            wrong = disagreement(m.group("var"), m.group("value"))
            if wrong:
                found.append((_line(text, m.start()), f"{m.group(0)!r}: {wrong}"))
    for m in _SWEEP_VALUE.finditer(text):
        wrong = disagreement(variable(SWEEPS[m.group("phrase")]), m.group("value"))
        if wrong:
            found.append((_line(text, m.start()), f"{m.group(0)!r}: {wrong}"))
    for m in _SWEEP_OFTEN.finditer(text):
        stated = _OFTEN.get(m.group("value").lower(), m.group("value"))
        wrong = disagreement(variable(SWEEPS[m.group("phrase")]), stated)
        if wrong:
            found.append((_line(text, m.start()), f"{m.group(0)!r}: {wrong}"))
    found += _tables(text)
    found += _dead_workers(text)
    name = path.name if path.parent.name != "docs" else f"docs/{path.name}"
    return [f"{name}:{line}: {message}" for line, message in sorted(found)]


def disagreement(name: str, stated: str) -> str:
    """What is wrong with ``stated`` as the default of the variable ``name`` ("" when it
    agrees, or states nothing checkable)."""
    f = FIELDS.get(name)
    m = _VALUE.match(re.sub(r"^`(\d[\d,.]*)`", r"\1", stated.strip()))  # `30` is 30
    if f is None or m is None:
        return ""
    default = getattr(DEFAULTS, f.name)
    shown = f"{name} is {_shown(default)} (Settings())"
    if f.type == "bool":
        word = (m.group("word") or "").lower()
        if not word:
            return ""
        return "" if (word in config_checks.TRUE) == default else shown
    if f.type == "str":
        literal = m.group("code") or m.group("bare") or m.group("word")
        if not literal or not default or f.metadata["shown"] or not _valid(f, literal):
            return ""
        return "" if literal.lower() == str(default).lower() else shown
    if m.group("number") is None:
        return ""
    value = _number(m.group("number"))
    unit = m.group("unit")
    if unit:
        unit = "a second" if unit.lower() == "a second" else unit
        if unit in _BYTES:
            value *= _BYTES[unit]
        elif unit != "a second":
            value *= _SECONDS[unit.lower()]
            if f.name.endswith("_days"):
                value /= 86400
            elif not f.name.endswith("_seconds"):
                return f"{name} is not a duration"
    return "" if math.isclose(value, float(default), rel_tol=1e-9) else shown


def _valid(f: Field[object], literal: str) -> bool:
    try:
        config_checks.parse_value(f.name, str(f.type), literal)
    except ValueError:
        return False
    return True


def _number(text: str) -> float:
    word = _WORDS.get(text.lower())
    return float(word) if word is not None else float(text.replace(",", ""))


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else repr(value) if value == "" else str(value)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


# --- Tables ---------------------------------------------------------------------------------

_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_ROLE = re.compile(r"(?P<role>[a-z]+)\s+(?P<value>\d[\d.]*)")


def _tables(text: str) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    rows: dict[str, list[int]] = {}
    column = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in _CELL_SPLIT.split(line.strip())[1:-1]]
        if column is None:  # a header
            lowered = [c.lower() for c in cells]
            column = lowered.index("default") if "default" in lowered else -1
            continue
        if column < 0 or set(line) <= set("|-: ") or len(cells) <= column:
            continue
        names = _row_variables(cells[0])
        for name in names:
            rows.setdefault(name, []).append(number)
        for name, stated in _pairs(names, cells[column]):
            wrong = disagreement(name, stated)
            if wrong:
                found.append((number, f"{name} | {stated} |: {wrong}"))
    for name, lines in rows.items():
        if len(lines) > 1 and name in FIELDS:
            found.append((lines[1], f"{name} has a row at lines {lines}: keep one"))
    return found


def _row_variables(cell: str) -> list[str]:
    """The variables a first cell names: `A` / `_B` / `C`; `…_<ROLE>_…` stays as it is."""
    names: list[str] = []
    for token in re.findall(r"`([^`]+)`", cell):
        if token.startswith("AWOOOP_"):
            names.append(token)
        elif token.startswith("_") and names:  # the name before, with this ending
            parts = names[-1].split("_")
            ending = token.strip("_").split("_")
            names.append("_".join(parts[: len(parts) - len(ending)] + ending))
    return names


def _pairs(names: list[str], cell: str) -> list[tuple[str, str]]:
    if len(names) == 1 and "<ROLE>" in names[0]:
        return [
            (names[0].replace("<ROLE>", m.group("role").upper()), m.group("value"))
            for m in _ROLE.finditer(cell)
        ]
    values = [v.strip() for v in cell.split(" / ")]
    return list(zip(names, values, strict=False)) if len(values) == len(names) else []


# --- A dead worker ----------------------------------------------------------------------------


def _blocks(text: str) -> list[tuple[int, str]]:
    """Paragraphs, list items and table cells, each with its first line's number."""
    blocks: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("|"):
            blocks += [(number, [cell]) for cell in _CELL_SPLIT.split(line)]
            blocks.append((number, []))
        elif not line.strip():
            blocks.append((number, []))
        elif re.match(r"\s*(?:[-*] |\d+\. )", line) or not blocks or not blocks[-1][1]:
            blocks.append((number, [line]))
        else:
            blocks[-1][1].append(line)
    return [(number, " ".join(lines)) for number, lines in blocks if lines]


def _dead_workers(text: str) -> list[tuple[int, str]]:
    lease, dead_after = "AWOOOP_LEASE_TTL_SECONDS", "AWOOOP_WORKER_DEAD_AFTER_SECONDS"
    bound = timing.takeover_within(
        DEFAULTS.worker_dead_after_seconds, DEFAULTS.worker_watch_interval_seconds
    )
    handed_on = (
        f"the reaper hands a dead worker's runs on within {bound:g} s of its last liveness beat "
        "(AWOOOP_WORKER_DEAD_AFTER_SECONDS + 2 × AWOOOP_WORKER_WATCH_INTERVAL_SECONDS)"
    )
    found = []
    for number, block in _blocks(text):
        dies = _DIES.search(block) is not None
        if dies and lease in block and dead_after not in block:
            found.append((number, f"a dead worker's runs wait for {lease} here: {handed_on}"))
        if dies and "worker" in block or "liveness beat" in block:
            for m in _ABOUT.finditer(block):
                if not bound <= float(m.group("seconds")) <= bound + CLAIM_SECONDS:
                    found.append((number, f"{m.group(0)!r}: {handed_on}, claimed within moments"))
    return found
