"""Figures of the chaos scenarios: printed, appended to a results file, written into
``docs/reliability.md``.

Each scenario fills a :class:`Figures` (the ``figures`` fixture). When the test ends, its
figures are printed and appended as one JSON line to ``AWOOOP_CHAOS_RESULTS`` (default
``.awooop/chaos/results.jsonl``), with whether the test passed. When the session ends, the
figures of every scenario that passed *at full size* (``AWOOOP_CHAOS_SCALE`` 1) replace that
scenario's block in ``docs/reliability.md``::

    <!-- figures:1 -->
    ...generated...
    <!-- /figures:1 -->

A scenario with no block yet gets one appended before ``<!-- figures:end -->``. Blocks of
scenarios that did not run (or failed) are left as they were: the file always shows each
scenario's last passing full-size run.

Another suite (``tests/cluster``) has a :class:`Suite` of its own: its size variable,
results file and document.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"
END_MARKER = "<!-- figures:end -->"


class Suite:
    """Where a fault suite's figures go: its size knob (``scale_env``), its results file
    (``results_env``, default ``.awooop/<name>/results.jsonl``) and its document."""

    def __init__(self, name: str, doc: Path, scale_env: str, results_env: str) -> None:
        self.name = name
        self.doc = doc
        self.scale_env = scale_env
        self.results_env = results_env

    def results_path(self) -> Path:
        default = ROOT / ".awooop" / self.name / "results.jsonl"
        return Path(os.environ.get(self.results_env) or default)

    def scale(self) -> float:
        """Multiplies each scenario's size (CI may run a reduced one)."""
        return float(os.environ.get(self.scale_env, "1") or 1)

    def scaled(self, n: int, least: int = 1) -> int:
        return max(least, round(n * self.scale()))

    def append(self, entry: dict[str, Any]) -> None:
        path = self.results_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(entry, default=str, sort_keys=True) + "\n")

    def write_docs(self, entries: list[dict[str, Any]]) -> list[str]:
        return write_docs(entries, self.doc)


CHAOS = Suite("chaos", DOC, "AWOOOP_CHAOS_SCALE", "AWOOOP_CHAOS_RESULTS")


def results_path() -> Path:
    return CHAOS.results_path()


def scale() -> float:
    """``AWOOOP_CHAOS_SCALE``: multiplies each scenario's size (CI may run a reduced one)."""
    return CHAOS.scale()


def scaled(n: int, least: int = 1) -> int:
    return CHAOS.scaled(n, least)


class Figures(dict):
    """A scenario's figures: ``figures.scenario(id, title)`` once, then ``figures[k] = v``."""

    id: str = ""
    title: str = ""

    def __init__(self, suite: Suite = CHAOS) -> None:
        super().__init__()
        self.suite = suite

    def scenario(self, scenario_id: str, title: str) -> Figures:
        self.id, self.title = scenario_id, title
        return self

    def finish(self, passed: bool, nodeid: str) -> dict[str, Any]:
        """Append this scenario's entry to its suite's results file and print its figures;
        returns the entry."""
        entry = self.entry(passed, nodeid)
        self.suite.append(entry)
        outcome = "passed" if passed else "FAILED"
        print(f"\n{self.suite.name} scenario {self.id} ({outcome}): {self.title}")
        for key, value in self.items():
            print(f"  {key}: {value}")
        return entry

    def entry(self, passed: bool, nodeid: str) -> dict[str, Any]:
        return {
            "scenario": self.id,
            "title": self.title,
            "test": nodeid,
            "passed": passed,
            "scale": self.suite.scale(),
            "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "figures": dict(self),
        }


def append(entry: dict[str, Any]) -> None:
    CHAOS.append(entry)


def render(entry: dict[str, Any]) -> str:
    lines = [
        f"Last full run: {entry['at']} ({entry['machine']}), `{entry['test']}`.",
        "",
        "| figure | value |",
        "|---|---|",
    ]
    for name, value in entry["figures"].items():
        if isinstance(value, float):
            value = f"{value:.2f}"
        elif isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in value.items()) or "—"
        lines.append(f"| {name} | {value} |")
    return "\n".join(lines)


def write_docs(entries: list[dict[str, Any]], doc: Path = DOC) -> list[str]:
    """Replace each passing full-size scenario's block; returns the scenario ids written."""
    text = doc.read_text() if doc.exists() else f"# Reliability\n\n{END_MARKER}\n"
    written = []
    for entry in entries:
        if not entry["passed"] or entry["scale"] != 1 or not entry["scenario"]:
            continue
        sid = entry["scenario"]
        block = f"<!-- figures:{sid} -->\n{render(entry)}\n<!-- /figures:{sid} -->"
        pattern = re.compile(
            rf"<!-- figures:{re.escape(sid)} -->.*?<!-- /figures:{re.escape(sid)} -->", re.S
        )
        if pattern.search(text):
            text = pattern.sub(lambda _, block=block: block, text)
        elif END_MARKER in text:
            heading = f"### {sid}. {entry['title']}\n\n"
            text = text.replace(END_MARKER, f"{heading}{block}\n\n{END_MARKER}")
        else:
            text += f"\n### {sid}. {entry['title']}\n\n{block}\n"
        written.append(sid)
    if written:
        doc.write_text(text)
    return written
