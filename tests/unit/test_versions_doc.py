"""docs/versions.md: its Python examples run as written, and the two versions it registers
side by side are what it says they are."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from awooop.domain.workflow import StepContext
from awooop.workflows import registry

# The examples register restart-service v1 and v2; other pages register their own v1.
pytestmark = pytest.mark.usefixtures("own_registry")

DOC = Path(__file__).resolve().parents[2] / "docs" / "versions.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def run_examples() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "docs_versions"}
    blocks = PYTHON_BLOCK.findall(DOC.read_text())
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - our own document
    return namespace


def test_the_examples_register_two_versions_and_new_events_start_the_second():
    examples = run_examples()

    v1, v2 = examples["RESTART_V1"], examples["RESTART_V2"]
    assert (registry.get("restart-service", 1), registry.get("restart-service", 2)) == (v1, v2)
    assert registry.latest("restart-service") is v2
    assert v1.digest != v2.digest
    assert [s.name for s in v2.steps] == ["check", "restart", "verify"]


def test_the_example_handlers_read_a_typed_alertmanager_event():
    examples = run_examples()
    alert = {"labels": {"instance": "db-1"}, "status": "firing"}
    ctx = StepContext(
        run_id="r",
        project_id="p",
        input={
            "channel": "alertmanager",
            "provider_event_id": "k",
            "event": {"status": "firing", "alerts": [alert]},
            "meta": {},
        },
        outputs={},
        step="check",
        attempt=1,
        effect_id="e",
        command_id="c",
    )

    assert examples["check"](ctx) == {"status": "firing", "instances": ["db-1"]}
