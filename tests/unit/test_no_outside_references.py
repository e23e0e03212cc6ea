"""The repository speaks for itself: no tracked text file points at a document outside it or at
a tracker issue. A rule is written out where it applies ("every worker write is fenced"), or
points at the page of this repository that explains it (docs/design.md, docs/protocol.md),
never at a design record, a section of an outside document, or an issue number."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

# What a reference to something outside the repository looks like.
OUTSIDE = {
    "a design record": re.compile(r"\bADR\b"),
    "the outside design document": re.compile(r"\bDESIGN\b"),
    "a numbered section": re.compile(r"§"),
    "a tracker issue": re.compile(r"\b[Ii]ssues?[ -]#?\d+"),
}
# A bare "#12" is a tracker reference in prose and code; in a stylesheet or a page it is a
# colour, so those files are left to the other patterns.
BARE_NUMBER = re.compile(r"(?<![\w&#/])#\d+\b")
MARKUP = (".css", ".html", ".svg", ".js")


def references(path: str, text: str) -> list[str]:
    """``path:line: what`` for each line of ``text`` that points outside the repository."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        kinds = [kind for kind, pattern in OUTSIDE.items() if pattern.search(line)]
        if not path.endswith(MARKUP) and BARE_NUMBER.search(line):
            kinds.append("a tracker number")
        found += [f"{path}:{number}: {kind}: {line.strip()[:120]}" for kind in kinds]
    return found


def tracked_text_files() -> dict[str, str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    files = {}
    for path in filter(None, listed.split("\0")):
        file = ROOT / path
        if path == THIS or not file.is_file():
            continue
        data = file.read_bytes()
        if b"\0" in data:
            continue  # binary (screenshots)
        try:
            files[path] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return files


def test_no_tracked_file_points_outside_the_repository():
    files = tracked_text_files()

    assert "README.md" in files and "docs/design.md" in files
    assert [ref for path, text in files.items() for ref in references(path, text)] == []


def test_the_check_finds_each_kind_of_outside_reference():
    lines = [
        "The lease protocol of ADR-114 D2/D3.",
        "as the ADR says",
        "(DESIGN §9.4)",
        "see DESIGN.md",
        "Targets (§8)",
        "Every command works as written (issue 12).",
        "Issue 11, scenario 8",
        "after issues 4 and 5 landed",
        "fixed in issue #14",
        "benchmarks.md#retention-issue-12",
        "fixed in #14",
    ]

    found = references("docs/page.md", "\n".join(lines))

    assert sorted({int(ref.split(":")[1]) for ref in found}) == list(range(1, len(lines) + 1))


def test_the_check_leaves_the_project_s_own_words_alone():
    text = "\n".join(
        [
            '"issue": {"number": 12},',
            'url = f"{base}/api/v1/repos/{repo}/issues/{index}/comments"',
            '("X-Gitea-Event", b"issues")',
            "docs/design.md explains the design",
            "scenario 8 of docs/reliability.md",
            "### 1. Worker SIGKILL storm",
            "&#8212; an HTML entity",
        ]
    )

    assert references("awooop/page.py", text) == []
    assert references("awooop/web/static/console.css", "--fg: #1d2330; --x: #123456;") == []
