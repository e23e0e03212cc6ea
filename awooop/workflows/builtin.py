"""Built-in workflows: one harmless demo per channel, and a no-op workflow for benchmarks.

Each demo summarises the event (read through :mod:`awooop.events`, so a type checker knows
each provider's fields), decides what it would do, and "replies" by writing a log
line (``action=reply``) and returning the reply as the run's output — visible with
``GET /v1/projects/{project_id}/runs/{run_id}``. Outbound chat replies come with the outbox.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from awooop import events
from awooop.domain.workflow import Step, StepContext, Workflow
from awooop.workflows.registry import register

log = logging.getLogger("awooop.workflows")


def _summarise_telegram(ctx: StepContext) -> str:
    update = events.telegram_event(ctx)
    message = update.get("message") or update.get("edited_message") or events.TelegramMessage()
    who = message.get("from", events.TelegramUser()).get("username") or "someone"
    text = message.get("text") or "(no text)"
    return f"telegram message from {who}: {text}"


def _summarise_alertmanager(ctx: StepContext) -> str:
    notification = events.alertmanager_event(ctx)
    alerts = notification["alerts"]
    names = sorted({a.get("labels", {}).get("alertname", "?") for a in alerts})
    return f"alertmanager {notification['status']}: {len(alerts)} alert(s) {', '.join(names)}"


def _summarise_gitea(ctx: StepContext) -> str:
    payload = events.gitea_event(ctx)
    repo = payload.get("repository", events.GiteaRepository()).get("full_name") or "?"
    what = payload.get("action") or ctx.meta.get("event_type") or "event"
    return f"gitea {what} on {repo}"


def _summarise_line(ctx: StepContext) -> str:
    event = events.line_event(ctx)
    kind = event.get("type", "event")
    text = event.get("message", events.LineMessage()).get("text") or kind
    return f"line {kind}: {text}"


def _summarise_api(ctx: StepContext) -> str:
    return f"api event with keys {sorted(events.api_event(ctx))}"


_SUMMARISERS: dict[str, Callable[[StepContext], str]] = {
    "telegram": _summarise_telegram,
    "alertmanager": _summarise_alertmanager,
    "gitea": _summarise_gitea,
    "line": _summarise_line,
    "api": _summarise_api,
}


def summarise(ctx: StepContext) -> dict[str, Any]:
    return {"summary": _SUMMARISERS[ctx.channel](ctx)}


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

# How the demos' descriptions name each channel's events.
_EVENTS = {
    "telegram": "a Telegram message",
    "alertmanager": "an Alertmanager notification",
    "gitea": "a Gitea webhook",
    "line": "a LINE message",
    "api": "an API event",
}

DEMO_WORKFLOWS = {
    channel: register(
        Workflow(
            f"demo-{channel}",
            version=1,
            steps=DEMO_STEPS,
            description=f"Summarise {_EVENTS[channel]} and log a reply",
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
