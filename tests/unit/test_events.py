"""Typed events: the helpers check the run's channel, the demo workflows read through them,
and a type checker refuses a field a provider does not send."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from awooop import events
from awooop.domain.workflow import StepContext
from awooop.workflows import builtin

ALERTMANAGER = {
    "version": "4",
    "receiver": "ops",
    "groupKey": '{}:{alertname="DiskFull"}',
    "status": "firing",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "DiskFull", "instance": "db-1"},
            "annotations": {},
            "startsAt": "2026-01-01T00:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus/graph",
            "fingerprint": "a1",
        }
    ],
}


def context(channel: str, event: dict[str, Any], meta: dict[str, Any] | None = None):
    run_input = {
        "channel": channel,
        "provider_event_id": "e-1",
        "event": event,
        "meta": meta or {},
        "project": {},
    }
    return StepContext(
        run_id="r-1",
        project_id="p",
        input=run_input,
        outputs={},
        step="summarise",
        attempt=1,
        effect_id="r-1:summarise:forward",
        command_id="c",
    )


def test_a_channel_helper_returns_the_event_of_a_run_from_its_channel():
    ctx = context("alertmanager", ALERTMANAGER)

    notification = events.alertmanager_event(ctx)

    assert notification["alerts"][0]["labels"]["alertname"] == "DiskFull"
    assert (ctx.channel, ctx.event, ctx.meta) == ("alertmanager", ALERTMANAGER, {})


def test_a_channel_helper_refuses_a_run_from_another_channel():
    ctx = context("telegram", {"update_id": 1})

    with pytest.raises(events.WrongChannel, match="reads a alertmanager event.*'telegram'"):
        events.alertmanager_event(ctx)


@pytest.mark.parametrize(
    ("channel", "event", "meta", "summary"),
    [
        ("alertmanager", ALERTMANAGER, {}, "alertmanager firing: 1 alert(s) DiskFull"),
        (
            "telegram",
            {"update_id": 7, "message": {"from": {"username": "ana"}, "text": "/status"}},
            {},
            "telegram message from ana: /status",
        ),
        (
            "telegram",
            {"update_id": 8, "edited_message": {}},
            {},
            "telegram message from someone: (no text)",
        ),
        (
            "gitea",
            {"repository": {"full_name": "ops/site"}},
            {"event_type": "push"},
            "gitea push on ops/site",
        ),
        (
            "gitea",
            {"action": "opened", "repository": {"full_name": "ops/site"}},
            {"event_type": "pull_request"},
            "gitea opened on ops/site",
        ),
        (
            "line",
            {"webhookEventId": "w", "type": "message", "message": {"text": "hi"}},
            {"destination": "U1"},
            "line message: hi",
        ),
        ("line", {"webhookEventId": "w", "type": "follow"}, {}, "line follow: follow"),
        ("api", {"b": 1, "a": 2}, {}, "api event with keys ['a', 'b']"),
    ],
)
def test_the_demo_workflows_summarise_each_channel_through_its_typed_event(
    channel, event, meta, summary
):
    assert builtin.summarise(context(channel, event, meta)) == {"summary": summary}


def test_the_package_ships_its_type_marker():
    assert (Path(events.__file__).parent / "py.typed").is_file()


def test_a_type_checker_refuses_a_field_a_provider_does_not_send(tmp_path):
    api = pytest.importorskip("mypy.api")
    handler = tmp_path / "handler.py"
    handler.write_text(
        textwrap.dedent(
            """
            from awooop import events
            from awooop.domain.workflow import StepContext

            def good(ctx: StepContext) -> str:
                notification = events.alertmanager_event(ctx)
                return notification["alerts"][0]["labels"]["alertname"]

            def bad(ctx: StepContext) -> str:
                return events.alertmanager_event(ctx)["alertname"]
            """
        )
    )

    limit = sys.getrecursionlimit()
    try:
        stdout, _, status = api.run(
            [str(handler), "--cache-dir", str(tmp_path / "cache"), "--no-error-summary"]
        )
    finally:
        # mypy raises the interpreter's recursion limit; later tests rely on the default
        sys.setrecursionlimit(limit)

    assert status == 1
    assert stdout.splitlines() == [
        f'{handler}:10: error: TypedDict "AlertmanagerNotification" has no key "alertname"  '
        "[typeddict-item]"
    ]
