"""The fenced blocks of README.md and docs/*.md, with where they are."""

from __future__ import annotations

import linecache
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.S | re.M)
# A Python block that is a file the reader saves: its first line names it.
FILE_NAME = re.compile(r"# (\w+\.py)\n")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the checkout
    line: int  # the page's line of the block's first line of code
    code: str

    @property
    def file_name(self) -> str | None:
        match = FILE_NAME.match(self.code)
        return match.group(1) if match else None

    def compiled(self) -> types.CodeType:
        """The block's code object. A traceback through it names the page and the page's own
        line, and shows the failing statement (the page's Python, at its lines, is what
        ``linecache`` has for the page)."""
        lines = (ROOT / self.page).read_text().splitlines(keepends=True)
        python = ["\n"] * len(lines)
        for block in python_blocks(ROOT / self.page):
            at = block.line - 1
            python[at : at + block.code.count("\n")] = block.code.splitlines(keepends=True)
        linecache.cache[self.page] = (len("".join(python)), None, python, self.page)
        return _moved(compile(self.code, self.page, "exec"), self.line - 1)


def _moved(code: types.CodeType, lines: int) -> types.CodeType:
    """``code`` and the code it holds (functions, classes) ``lines`` further down (line
    numbers count from a code object's first line)."""
    consts = tuple(
        _moved(const, lines) if isinstance(const, types.CodeType) else const
        for const in code.co_consts
    )
    return code.replace(co_firstlineno=code.co_firstlineno + lines, co_consts=consts)


def fenced(page: Path) -> Iterator[tuple[str, Block]]:
    """Every fenced block of ``page``: its language (the fence's first word) and the block."""
    text = page.read_text()
    name = page.relative_to(ROOT).as_posix()
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start(2)) + 1
        yield match.group(1), Block(name, line, match.group(2))


def python_blocks(page: Path) -> list[Block]:
    """The page's ```python blocks, in order."""
    return [block for language, block in fenced(page) if language == "python"]
