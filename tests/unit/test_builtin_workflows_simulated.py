"""The built-in workflows (demo per channel, noop, alert-triage, chatops, late-compensation),
tested in memory through awooop.testing.Simulator."""

from __future__ import annotations

from typing import Any

import pytest

from awooop.domain import saga
from awooop.testing import Simulator
from awooop.workflows import builtin, late, operations
from awooop.workflows.actions import ActionUnavailable

EVENTS: dict[str, dict[str, Any]] = {
    "telegram": {"message": {"text": "disk full", "from": {"username": "bob"}}},
    "alertmanager": {"status": "resolved", "alerts": [{"labels": {"alertname": "Disk"}}]},
    "gitea": {"action": "opened", "repository": {"full_name": "ops/infra"}},
    "line": {"type": "message", "message": {"text": "hello"}},
    "api": {"kind": "ping"},
}


@pytest.mark.parametrize("channel", sorted(EVENTS))
def test_each_demo_workflow_replies_with_a_summary(channel: str) -> None:
    sim = Simulator(builtin.DEMO_WORKFLOWS[channel], EVENTS[channel], channel=channel)

    assert sim.run() == "COMPLETED"
    assert sim.output["reply"].startswith("[awooop] ")
    assert [c.step for c in sim.calls] == ["summarise", "decide", "reply"]


def test_each_demo_is_described_with_its_provider_spelled_as_the_provider_does() -> None:
    # `awooop workflows` shows these: "Summarise a alertmanager event" read badly.
    products = {
        "telegram": "Telegram",
        "alertmanager": "Alertmanager",
        "gitea": "Gitea",
        "line": "LINE",
        "api": "API",
    }
    for channel, product in products.items():
        description = builtin.DEMO_WORKFLOWS[channel].description
        assert f" {product} " in description, description
        article = description.split()[1]
        assert article == ("an" if product[0] in "AEIOU" else "a"), description


def test_a_resolved_alert_is_only_acknowledged() -> None:
    wf = builtin.DEMO_WORKFLOWS["alertmanager"]
    sim = Simulator(wf, EVENTS["alertmanager"], channel="alertmanager")
    sim.run()

    assert sim.outputs["decide"]["action"] == "acknowledge"


def test_noop_completes_with_three_steps() -> None:
    sim = Simulator(builtin.NOOP_3)

    assert sim.run() == "COMPLETED"
    assert sim.trace() == [(s, "forward", "SUCCEEDED") for s in ("one", "two", "three")]


def chat(text: str) -> dict[str, Any]:
    return {"message": {"text": text, "chat": {"id": 42}}}


def test_chatops_asks_before_restarting_and_restarts_once_approved() -> None:
    sim = Simulator(operations.CHATOPS, chat("/restart web"), channel="telegram")

    assert sim.run() == "WAITING"
    assert sim.waiting is not None and sim.waiting.kind == "approval"
    assert sim.journal[-1]["output"]["prompt"].startswith("Restart web?")
    sim.approve(actor="alice")
    sim.outcome("act", output={"service": "web", "result": {"restarted": True}})
    assert sim.run() == "COMPLETED"
    assert sim.output == {"reply": "[awooop] restarted web"}


def test_chatops_rejects_what_is_not_a_command() -> None:
    sim = Simulator(operations.CHATOPS, chat("hello"), channel="telegram")

    assert sim.run() == "FAILED"
    assert sim.failure_code == saga.STEP_REJECTED
    assert sim.calls[-1].step == "parse"


def test_chatops_without_an_actions_url_is_rejected_by_act() -> None:
    sim = Simulator(operations.CHATOPS, chat("/restart web"), channel="telegram")
    sim.run()
    sim.approve()

    assert sim.run() == "FAILED"
    assert "actions_url" in (sim.failure_reason or "")


def test_chatops_retries_an_unavailable_endpoint_with_its_http_policy() -> None:
    sim = Simulator(operations.CHATOPS, chat("/restart web"), channel="telegram")
    sim.run()
    sim.approve()
    sim.outcome("act", fail=ActionUnavailable("502"))
    sim.outcome("act", output={"service": "web", "result": {}})

    assert sim.run() == "WAITING"
    assert sim.waiting is not None and sim.waiting.kind == "retry"
    sim.advance(10)
    assert sim.run() == "COMPLETED"


def test_chatops_fails_at_once_on_an_error_its_policy_does_not_retry() -> None:
    sim = Simulator(operations.CHATOPS, chat("/restart web"), channel="telegram")
    sim.run()
    sim.approve()
    sim.outcome("act", fail="a bug")

    assert sim.run() == "FAILED"
    assert sim.failure_code == saga.RETRIES_EXHAUSTED


CRITICAL = {
    "status": "firing",
    "alerts": [{"labels": {"alertname": "Down", "severity": "critical", "instance": "web1"}}],
}


def triage() -> Simulator:
    """alert-triage on a firing critical alert, its diagnostics requested."""
    sim = Simulator(operations.ALERT_TRIAGE, CRITICAL, channel="alertmanager")
    sim.outcome("diagnose", output={"requested": True, "ticket": "t1"})
    assert sim.run() == "WAITING"
    assert sim.waiting is not None and sim.waiting.kind == "tool"
    sim.tool_result("diagnose", {"top": "oom"})
    assert sim.run() == "WAITING"
    assert sim.waiting is not None and sim.waiting.kind == "approval"
    return sim


def test_alert_triage_remediates_and_verifies_once_approved() -> None:
    sim = triage()
    sim.approve()
    sim.outcome("remediate", output={"action": "remediated", "change": "c1"})
    sim.outcome("verify", output={"checked": True, "healthy": True})

    assert sim.run() == "COMPLETED"
    assert "remediated" in sim.output["reply"]


def test_alert_triage_rolls_back_when_verification_rejects() -> None:
    sim = triage()
    sim.approve()
    sim.outcome("remediate", output={"action": "remediated", "change": "c1"})
    sim.outcome("verify", reject="still unhealthy after remediation")
    sim.outcome("remediate", phase="compensate", output={"rolled_back": True})

    assert sim.run() == "FAILED"
    assert sim.compensated == ["remediate"]


def test_alert_triage_needs_no_approval_for_a_warning() -> None:
    warning = {"status": "firing", "alerts": [{"labels": {"severity": "warning"}}]}
    sim = Simulator(operations.ALERT_TRIAGE, warning, channel="alertmanager")
    sim.outcome("diagnose", output={"requested": True})
    sim.run()
    sim.tool_result("diagnose", {"top": "cpu"})

    assert sim.run() == "COMPLETED"  # no approval asked, nothing remediated
    assert sim.outputs["approve"] == {"needed": False}
    assert sim.outputs["remediate"]["action"] == "none"


def test_alert_triage_dispatches_diagnostics_again_after_the_tool_timeout() -> None:
    sim = Simulator(operations.ALERT_TRIAGE, CRITICAL, channel="alertmanager")
    sim.outcome("diagnose", output={"requested": True}).outcome("diagnose", output={})
    sim.run()
    sim.advance(300).run()  # no result: a transient failure, retried after the back-off
    assert sim.waiting is not None and sim.waiting.kind == "retry"
    sim.advance(10)

    assert sim.run() == "WAITING"
    assert sim.waiting is not None and sim.waiting.kind == "tool"
    assert statuses_of(sim, "diagnose") == ["DISPATCHED", "FAILED", "DISPATCHED"]


def statuses_of(sim: Simulator, step: str) -> list[str]:
    return [s for (n, p, s) in sim.trace() if (n, p) == (step, "forward")]


def test_late_compensation_runs_the_original_steps_compensation() -> None:
    # The original run's step, as the tool-results API describes it in the follow-up's event.
    event = {
        "workflow": "alert-triage",
        "version": 2,
        "step": "remediate",
        "run_id": "r-1",
        "input": {"channel": "alertmanager", "event": CRITICAL, "project": {}},
        "output": {"action": "none"},
    }
    sim = Simulator(late.LATE_COMPENSATION, event)

    assert sim.run() == "COMPLETED"
    assert sim.output == {"rolled_back": False}
