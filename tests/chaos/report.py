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


def results_path() -> Path:
    return Path(
        os.environ.get("AWOOOP_CHAOS_RESULTS", ROOT / ".awooop" / "chaos" / "results.jsonl")
    )


def scale() -> float:
    """``AWOOOP_CHAOS_SCALE``: multiplies each scenario's size (CI may run a reduced one)."""
    return float(os.environ.get("AWOOOP_CHAOS_SCALE", "1") or 1)


def scaled(n: int, least: int = 1) -> int:
    return max(least, round(n * scale()))


class Figures(dict):
    """A scenario's figures: ``figures.scenario(id, title)`` once, then ``figures[k] = v``."""

    id: str = ""
    title: str = ""

    def scenario(self, scenario_id: str, title: str) -> Figures:
        self.id, self.title = scenario_id, title
        return self

    def entry(self, passed: bool, nodeid: str) -> dict[str, Any]:
        return {
            "scenario": self.id,
            "title": self.title,
            "test": nodeid,
            "passed": passed,
            "scale": scale(),
            "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "figures": dict(self),
        }


def append(entry: dict[str, Any]) -> None:
    path = results_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(entry, default=str, sort_keys=True) + "\n")


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
