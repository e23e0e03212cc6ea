"""Built-in workflows: one harmless demo per channel, and a no-op workflow for benchmarks.

Each demo summarises the event, decides what it would do, and "replies" by writing a log
line (``action=reply``) and returning the reply as the run's output — visible with
``GET /v1/projects/{project_id}/runs/{run_id}``. Outbound chat replies come with the outbox.
"""

from __future__ import annotations

import logging
from typing import Any

from awooop.domain.workflow import Step, StepContext, Workflow
from awooop.workflows.registry import register

log = logging.getLogger("awooop.workflows")


def _summarise_telegram(event: dict[str, Any]) -> str:
    message = event.get("message") or event.get("edited_message") or {}
    who = (message.get("from") or {}).get("username") or "someone"
    text = message.get("text") or "(no text)"
    return f"telegram message from {who}: {text}"


def _summarise_alertmanager(event: dict[str, Any]) -> str:
    alerts = event.get("alerts") or []
    names = sorted({str((a.get("labels") or {}).get("alertname", "?")) for a in alerts})
    return f"alertmanager {event.get('status', '?')}: {len(alerts)} alert(s) {', '.join(names)}"


def _summarise_gitea(event: dict[str, Any]) -> str:
    repo = (event.get("repository") or {}).get("full_name") or "?"
    return f"gitea {event.get('action') or 'event'} on {repo}"


def _summarise_line(event: dict[str, Any]) -> str:
    text = (event.get("message") or {}).get("text") or event.get("type", "event")
    return f"line {event.get('type', 'event')}: {text}"


def _summarise_api(event: dict[str, Any]) -> str:
    return f"api event with keys {sorted(event)}"


_SUMMARISERS = {
    "telegram": _summarise_telegram,
    "alertmanager": _summarise_alertmanager,
    "gitea": _summarise_gitea,
    "line": _summarise_line,
    "api": _summarise_api,
}


def summarise(ctx: StepContext) -> dict[str, Any]:
    channel = ctx.input["channel"]
    return {"summary": _SUMMARISERS[channel](ctx.input["event"])}


def decide(ctx: StepContext) -> dict[str, Any]:
    summary = ctx.outputs["summarise"]["summary"]
    noisy = "resolved" in summary
    return {"action": "acknowledge" if noisy else "notify", "reason": "demo policy"}


def reply(ctx: StepContext) -> dict[str, Any]:
    text = f"[awooop] {ctx.outputs['decide']['action']}: {ctx.outputs['summarise']['summary']}"
    log.info(
        "demo reply",
        extra={
            "action": "reply",
            "run_id": ctx.run_id,
            "project_id": ctx.project_id,
            "reply": text,
        },
    )
    return {"reply": text}


DEMO_STEPS = [Step("summarise", summarise), Step("decide", decide), Step("reply", reply)]

DEMO_WORKFLOWS = {
    channel: register(
        Workflow(
            f"demo-{channel}",
            version=1,
            steps=DEMO_STEPS,
            description=f"Summarise a {channel} event and log a reply",
        )
    )
    for channel in _SUMMARISERS
}


def _noop(ctx: StepContext) -> None:
    return None


NOOP_3 = register(
    Workflow(
        "noop-3",
        version=1,
        steps=[Step("one", _noop), Step("two", _noop), Step("three", _noop)],
        description="Three no-op steps (benchmarks)",
    )
)
