"""Approval steps: asking (from the runner, under the lease) and deciding (from the API, the
ops console, a Telegram button, a LINE postback, or the expiry timer).

Tokens are 32 random bytes (base64url, 43 characters), only the SHA-256 hash
stored, bound to project + run + step + action, single use, worthless once the run has left
WAITING_APPROVAL. The raw token exists in memory here and, encrypted, in the prompt's outbox
row until the prompt is sent; it is never logged and never a Celery argument.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine

from awooop import metrics
from awooop import secrets as crypto
from awooop.config import Settings
from awooop.domain import saga
from awooop.domain.workflow import Step
from awooop.outbound import messages
from awooop.store import approvals
from awooop.store.leases import Claim, Position

log = logging.getLogger("awooop.engine.approvals")


def outcome_entry(step: Step, decided: dict[str, Any]) -> dict[str, Any]:
    """The journal fields of an approval step's attempt, from the decision taken on it."""
    assert step.approval is not None
    decision = decided.get("decision")
    by = {"by": decided.get("actor"), "via": decided.get("via"), "comment": decided.get("comment")}
    if decision == "approved":
        return {"status": saga.SUCCEEDED, "output": {"approved": True, **by}}
    if decision == "rejected" and step.approval.on_reject == "continue":
        return {"status": saga.SUCCEEDED, "output": {"approved": False, **by}}
    if decision == "rejected":
        return {
            "status": saga.REJECTED,
            "error": f"{step.approval.action} rejected by {decided.get('actor')}",
            "failure_code": saga.APPROVAL_REJECTED,
        }
    return {
        "status": saga.REJECTED,
        "error": f"nobody approved {step.approval.action} in time",
        "failure_code": saga.APPROVAL_EXPIRED,
    }


def _approvers(step: Step, run_input: dict[str, Any], targets: list[dict[str, Any]]) -> dict:
    assert step.approval is not None
    configured = (run_input.get("project") or {}).get("approvers") or {}
    users: dict[str, list[str]] = {}
    for channel in ("telegram", "line"):
        listed = configured.get(channel) if isinstance(configured, dict) else None
        names = [str(u) for u in (listed if isinstance(listed, list) else [])]
        users[channel] = sorted({*names, *(str(u) for u in step.approval.chat_users)})
    return {
        "roles": list(step.approval.roles),
        "users": users,
        # A button press counts only from a chat the prompt went to.
        "chats": {
            "telegram": [str(t["chat_id"]) for t in targets if t["channel"] == "telegram"],
            "line": [t["to"] for t in targets if t["channel"] == "line"],
        },
    }


def request(
    conn: Connection,
    claim: Claim,
    step: Step,
    attempt: int,
    entries: list[dict[str, Any]],
    settings: Settings,
    write_id: uuid.UUID | None = None,
) -> tuple[Position, list[uuid.UUID]] | None:
    """Create the approval, queue its prompt and release the run, in one fenced statement
    (identity ``write_id``): where it left the run and the prompt's outbox message ids; None
    when it matched no row."""
    approval = step.approval
    assert approval is not None
    token = crypto.new_token(32)
    prompt = str((entries[-1].get("output") or {}).get("prompt", ""))
    targets = messages.reply_targets(claim.input)
    decide_url = (
        f"{settings.public_base_url.rstrip('/')}/v1/projects/{claim.project_id}/approvals"
        if settings.public_base_url
        else None
    )
    prompts = messages.approval_prompt(
        targets,
        run_id=str(claim.run_id),
        step=step.name,
        action=approval.action,
        prompt=prompt,
        ttl_seconds=approval.ttl_seconds,
        sealed_token=crypto.SecretBox(settings.secret_keys).encrypt(token),
        decide_url=decide_url,
    )
    if not targets:
        log.warning(
            "approval requested but the run has nowhere to send the prompt; decide through the API",
            extra={"action": "approval_no_target", "run_id": str(claim.run_id)},
        )
    return approvals.wait_for_approval(
        conn,
        claim,
        entries,
        step=step.name,
        attempt=attempt,
        ttl_seconds=approval.ttl_seconds,
        token_hash=crypto.sha256_hex(token),
        action=approval.action,
        approvers=_approvers(step, claim.input, targets),
        prompt=prompt,
        messages=prompts,
        write_id=write_id,
    )


class DecisionRefused(Exception):
    """The token does not open a decision for this caller; ``reason`` says which rule."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason  # not_found, forbidden, expired, used, not_waiting
        self.message = message


@dataclass(frozen=True)
class Decided:
    run_id: uuid.UUID
    approval_id: uuid.UUID
    decision: str  # approve | reject
    message_ids: list[uuid.UUID]
    action: str


# Callers that present a project API token: its role decides, as the approval's rule says.
ROLE_VIAS = ("api", "console")


@dataclass(frozen=True)
class Caller:
    """Who is deciding, and through what."""

    via: str  # api, console, telegram, line
    actor: str
    role: str | None = None  # an API token's role
    user_id: str | None = None  # a chat user
    chat_id: str | None = None  # the chat the button was pressed in


def _refusal(found: approvals.PendingApproval) -> DecisionRefused:
    if found.status == "EXPIRED" or (found.status == "PENDING" and found.expired):
        return DecisionRefused("expired", "this approval has expired")
    if found.status != "PENDING":
        return DecisionRefused("used", f"this approval was already {found.status.lower()}")
    return DecisionRefused("not_waiting", "the run is no longer waiting for this approval")


def _allowed(found: approvals.PendingApproval, caller: Caller) -> bool:
    rules = found.approvers
    if caller.via in ROLE_VIAS:
        return caller.role in rules.get("roles", [])
    users = rules.get("users", {}).get(caller.via, [])
    chats = rules.get("chats", {}).get(caller.via, [])
    return caller.user_id in users and caller.chat_id in chats


def decide(
    engine: Engine,
    project_id: str,
    token: str,
    decision: str,
    caller: Caller,
    comment: str | None = None,
    run_id: uuid.UUID | None = None,
    step: str | None = None,
    extra_messages: list[messages.Message] | None = None,
) -> Decided:
    """Take ``decision`` (approve | reject) with ``token``, or raise :class:`DecisionRefused`
    with nothing changed. ``run_id`` / ``step``, when the caller names them, must be the
    ones the token is bound to."""
    with engine.connect() as conn:
        found = approvals.lookup(conn, project_id, crypto.sha256_hex(token))
    if (
        found is None
        or (run_id is not None and run_id != found.run_id)
        or (step is not None and step != found.step)
    ):
        raise DecisionRefused("not_found", "no such approval in this project")
    return _take(engine, found, decision, caller, comment, extra_messages)


def decide_by_id(
    engine: Engine,
    project_id: str,
    approval_id: uuid.UUID,
    decision: str,
    caller: Caller,
    comment: str | None = None,
) -> Decided:
    """Take ``decision`` on the approval ``approval_id`` for a caller signed in with an API
    token (the ops console), whose role the approval's rule must allow; else
    :class:`DecisionRefused` with nothing changed. The rest is :func:`decide`'s."""
    assert caller.via in ROLE_VIAS
    with engine.connect() as conn:
        found = approvals.lookup_by_id(conn, project_id, approval_id)
    if found is None:
        raise DecisionRefused("not_found", "no such approval in this project")
    return _take(engine, found, decision, caller, comment, None)


def _take(
    engine: Engine,
    found: approvals.PendingApproval,
    decision: str,
    caller: Caller,
    comment: str | None,
    extra_messages: list[messages.Message] | None,
) -> Decided:
    """The decision on an approval the caller found: who may take it, whether it is still
    open, the replies, and the one statement that takes it."""
    if not _allowed(found, caller):
        raise DecisionRefused("forbidden", "you may not decide this approval")
    if found.status != "PENDING" or found.expired or not found.run_waiting_here:
        raise _refusal(found)
    targets = messages.reply_targets(found.input)
    replies = messages.decision_messages(
        targets,
        run_id=str(found.run_id),
        action=found.action,
        decision=approvals.DECISIONS[decision][1],
        actor=caller.actor,
    ) + list(extra_messages or [])
    with engine.connect() as conn:
        taken = approvals.decide(
            conn,
            found.project_id,
            found.approval_id,
            decision,
            actor=caller.actor,
            via=caller.via,
            comment=comment,
            messages=replies,
        )
        if taken is None:  # someone else decided (or it expired) since the lookup
            again = approvals.lookup_by_id(conn, found.project_id, found.approval_id)
            raise _refusal(again or found)
    word = approvals.DECISIONS[decision][1]
    metrics.APPROVAL_WAIT.labels(word).observe(taken.waited_seconds)
    log.info(
        "approval decided",
        extra={
            "action": "approval_decided",
            "run_id": str(found.run_id),
            "project_id": found.project_id,
            "decision": decision,
            "via": caller.via,
        },
    )
    return Decided(found.run_id, found.approval_id, decision, taken.message_ids, found.action)
