"""Built-in workflows for real operations use cases: ``alert-triage`` and ``chatops``.

Route a channel to them (``awooop project routes ops alertmanager=alert-triage
telegram=chatops line=chatops``) and configure the automation endpoint they call
(``awooop project config ops actions_url=https://automation.example``). The endpoint gets
JSON POSTs with the step's ``effect_id`` as ``Idempotency-Key``:

- ``/diagnostics`` (alert-triage, a tool step): start collecting diagnostics; post the result
  to the ``result_url`` in the request (``POST …/runs/{run_id}/tool-results``).
- ``/remediate``, then ``/verify`` (answer ``{"healthy": true}``), and ``/rollback`` when
  verification fails (alert-triage, critical firing alerts only).
- ``/restart`` (chatops ``/restart <service>``).

Both ask a person first (version 2; version 1 stays registered for runs that started on it):
chatops before every restart, alert-triage before remediating a firing critical alert. The
prompt goes to the chat the command came from, or to the project's ops chat / webhook
(``notify_telegram_chat``, ``notify_line_to``, ``notify_url``); ``approvers`` in the project
configuration lists who may press the buttons (docs/approvals.md).
"""

from __future__ import annotations

import logging
from typing import Any

from awooop.domain.workflow import Approval, Reject, RetryPolicy, Step, StepContext, Workflow
from awooop.workflows import actions
from awooop.workflows.registry import register

log = logging.getLogger("awooop.workflows")

HTTP_RETRY = RetryPolicy(max_retries=3, base_delay=2.0, retry_on=(actions.ActionUnavailable,))


# --- alert-triage -----------------------------------------------------------------------


def classify(ctx: StepContext) -> dict[str, Any]:
    notification = ctx.input["event"]
    alerts = notification.get("alerts") or []
    severities = {str((a.get("labels") or {}).get("severity", "none")) for a in alerts}
    severity = next((s for s in ("critical", "warning", "info") if s in severities), "none")
    return {
        "status": notification.get("status"),
        "severity": severity,
        "alertnames": sorted({str((a.get("labels") or {}).get("alertname", "?")) for a in alerts}),
        "instances": sorted({str((a.get("labels") or {}).get("instance", "?")) for a in alerts}),
    }


def request_diagnostics(ctx: StepContext) -> dict[str, Any]:
    triage = ctx.outputs["classify"]
    answer = actions.post(
        ctx,
        "diagnostics",
        {
            "instances": triage["instances"],
            "alertnames": triage["alertnames"],
            "result_url": f"/v1/projects/{ctx.project_id}/runs/{ctx.run_id}/tool-results",
            "step": ctx.step,
        },
    )
    return {"requested": True, "ticket": answer.get("ticket")}


def _remediation_needed(triage: dict[str, Any]) -> bool:
    return bool(triage["status"] == "firing" and triage["severity"] == "critical")


def ask_remediation(ctx: StepContext) -> str | None:
    """The approval prompt, or None when nothing will be remediated (no approval needed)."""
    triage = ctx.outputs["classify"]
    if not _remediation_needed(triage):
        return None
    diagnostics = ctx.outputs.get("diagnose")
    return (
        f"{', '.join(triage['alertnames'])} is firing ({triage['severity']}) on "
        f"{', '.join(triage['instances'])}. Diagnostics: {diagnostics}. Remediate now?"
    )


def remediate(ctx: StepContext) -> dict[str, Any]:
    triage = ctx.outputs["classify"]
    if not _remediation_needed(triage):
        return {"action": "none", "reason": f"{triage['status']} / {triage['severity']}"}
    answer = actions.post(
        ctx,
        "remediate",
        {"instances": triage["instances"], "diagnostics": ctx.outputs.get("diagnose")},
    )
    return {"action": "remediated", "change": answer.get("change")}


def rollback(ctx: StepContext) -> dict[str, Any]:
    done = ctx.outputs.get("remediate") or {}
    if done.get("action") != "remediated":
        return {"rolled_back": False}
    actions.post(ctx, "rollback", {"change": done.get("change")})
    return {"rolled_back": True}


def verify(ctx: StepContext) -> dict[str, Any]:
    fix = ctx.outputs["remediate"]
    if fix["action"] != "remediated":
        return {"checked": False}
    answer = actions.post(ctx, "verify", {"change": fix.get("change")})
    if not answer.get("healthy"):
        raise Reject("still unhealthy after remediation")  # undo the remediation
    return {"checked": True, "healthy": True}


def report(ctx: StepContext) -> dict[str, Any]:
    triage, fix = ctx.outputs["classify"], ctx.outputs["remediate"]
    text = (
        f"[awooop] {triage['status']} {triage['severity']} "
        f"{', '.join(triage['alertnames'])} on {', '.join(triage['instances'])}: "
        f"{fix['action']}"
    )
    log.info(
        "alert triaged",
        extra={
            "action": "reply",
            "run_id": ctx.run_id,
            "project_id": ctx.project_id,
            "reply": text,
        },
    )
    return {"reply": text}


_DIAGNOSE = Step("diagnose", request_diagnostics, tool_timeout=300.0, retry=HTTP_RETRY)
_REMEDIATE = Step("remediate", remediate, compensate=rollback, retry=HTTP_RETRY)

ALERT_TRIAGE_V1 = register(
    Workflow(
        "alert-triage",
        1,
        [
            Step("classify", classify),
            _DIAGNOSE,
            _REMEDIATE,
            Step("verify", verify, retry=HTTP_RETRY),
            Step("report", report),
        ],
        description="Alertmanager: classify, collect diagnostics (tool), remediate critical "
        "alerts, verify (roll back if still unhealthy), report",
    )
)
ALERT_TRIAGE = register(
    Workflow(
        "alert-triage",
        2,
        [
            Step("classify", classify),
            _DIAGNOSE,
            Step("approve", ask_remediation, approval=Approval("remediate")),
            _REMEDIATE,
            Step("verify", verify, retry=HTTP_RETRY),
            Step("report", report),
        ],
        description="Alertmanager: classify, collect diagnostics (tool), ask a person, "
        "remediate critical alerts, verify (roll back if still unhealthy), report",
    )
)


# --- chatops ------------------------------------------------------------------------------

COMMANDS = {"/restart"}


def _message_text(ctx: StepContext) -> str:
    event = ctx.input["event"]
    if ctx.input["channel"] == "telegram":
        message = event.get("message") or event.get("edited_message") or {}
    else:  # line
        message = event.get("message") or {}
    return str(message.get("text") or "")


def parse_command(ctx: StepContext) -> dict[str, Any]:
    words = _message_text(ctx).split()
    if not words or words[0].split("@")[0] not in COMMANDS:
        raise Reject(f"not a command this bot knows: {' '.join(words)[:100]!r}")
    if len(words) != 2:
        raise Reject("usage: /restart <service>")
    return {"command": "restart", "service": words[1]}


def ask_restart(ctx: StepContext) -> str:
    service = ctx.outputs["parse"]["service"]
    return f"Restart {service}? (asked with: {_message_text(ctx)[:200]})"


def act(ctx: StepContext) -> dict[str, Any]:
    command = ctx.outputs["parse"]
    answer = actions.post(ctx, command["command"], {"service": command["service"]})
    return {"service": command["service"], "result": answer}


def reply(ctx: StepContext) -> dict[str, Any]:
    text = f"[awooop] restarted {ctx.outputs['act']['service']}"
    log.info(
        "chatops reply",
        extra={
            "action": "reply",
            "run_id": ctx.run_id,
            "project_id": ctx.project_id,
            "reply": text,
        },
    )
    return {"reply": text}


CHATOPS_V1 = register(
    Workflow(
        "chatops",
        1,
        [Step("parse", parse_command), Step("act", act, retry=HTTP_RETRY), Step("reply", reply)],
        description="Telegram/LINE commands such as /restart <service>: parse, act, reply",
    )
)
CHATOPS = register(
    Workflow(
        "chatops",
        2,
        [
            Step("parse", parse_command),
            Step("approve", ask_restart, approval=Approval("restart")),
            Step("act", act, retry=HTTP_RETRY),
            Step("reply", reply),
        ],
        description="Telegram/LINE commands such as /restart <service>: parse, ask a person "
        "in the chat, act, reply",
    )
)
