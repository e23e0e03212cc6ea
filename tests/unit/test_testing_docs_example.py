"""docs/testing.md's examples are real: its Python blocks run, and its simulator tests pass
(its fixture test runs in tests/integration/test_testing_docs_example.py)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def doc_namespace() -> dict[str, Any]:
    """The doc's Python blocks, run in order in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/testing.md has no Python blocks"
    namespace: dict[str, Any] = {"__name__": "docs_testing"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - our own docs
    return namespace


def doc_tests(namespace: dict[str, Any], fixture: str | None) -> list[Callable[..., Any]]:
    """The doc's test functions that take ``fixture`` (None: that take nothing)."""
    wanted = [] if fixture is None else [fixture]
    return [
        fn
        for name, fn in namespace.items()
        if name.startswith("test_") and list(inspect.signature(fn).parameters) == wanted
    ]


def test_the_simulator_examples_in_the_docs_pass() -> None:
    tests = doc_tests(doc_namespace(), None)

    assert len(tests) == 3
    for test in tests:
        test()
