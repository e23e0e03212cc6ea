"""Approval decisions that arrive as chat events: a Telegram ``callback_query`` from an
inline keyboard button, a LINE ``postback``. Ingress hands such events here instead of
starting a run. Each is deduplicated like any update (a replayed update is a duplicate, not a
second decision) and always answered 200, so the provider does not redeliver it; the person
who pressed the button gets an answer in the chat.

A provider's payload is the sender's JSON: any field may have any shape. Each object is read
through :func:`_object`, so a field that is not an object is as if it were absent (the event
is then no button press, or has no one to answer) — never an error.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from awooop.channels.base import InboundEvent
from awooop.engine import approvals
from awooop.outbound.messages import Message, parse_button
from awooop.store import dedupe, outbox

_REFUSALS = {
    "not_found": "This approval is not known here.",
    "forbidden": "You may not decide this approval.",
    "expired": "This approval has expired.",
    "used": "This approval was already decided.",
    "not_waiting": "The run no longer waits for this approval.",
}


@dataclass(frozen=True)
class ChatDecision:
    """What to answer the provider, and what to send once that is decided: the run to nudge
    and the outbox messages (the decision's replies, or the refusal)."""

    answer: dict[str, Any]
    runs: list[uuid.UUID] = field(default_factory=list)
    messages: list[uuid.UUID] = field(default_factory=list)


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def button_press(channel: str, event: InboundEvent) -> tuple[str, str] | None:
    """``(decision, token)`` when the event is one of our approval buttons being pressed."""
    payload = _object(event.payload)
    if channel == "telegram":
        data = _object(payload.get("callback_query")).get("data")
    elif channel == "line" and payload.get("type") == "postback":
        data = _object(payload.get("postback")).get("data")
    else:
        return None
    return parse_button(data) if isinstance(data, str) else None


def _caller(channel: str, payload: dict[str, Any]) -> approvals.Caller:
    if channel == "telegram":
        query = _object(payload.get("callback_query"))
        user = _object(query.get("from"))
        chat = _object(_object(query.get("message")).get("chat")).get("id")
        name = user.get("username") or user.get("id")
        return approvals.Caller(
            via="telegram",
            actor=f"telegram:{name}",
            user_id=str(user.get("id")),
            chat_id=None if chat is None else str(chat),
        )
    source = _object(payload.get("source"))
    user_id = source.get("userId")
    chat = source.get("groupId") or source.get("roomId") or user_id
    return approvals.Caller(via="line", actor=f"line:{user_id}", user_id=user_id, chat_id=chat)


def _answer(channel: str, event: InboundEvent, text: str) -> Message | None:
    """The reply to the person who pressed: Telegram's answerCallbackQuery, a LINE reply."""
    payload = _object(event.payload)
    if channel == "telegram":
        query = _object(payload.get("callback_query"))
        if "id" not in query:
            return None
        bot_id = event.provider_event_id.split(":", 1)[0]
        body = {"method": "answer", "bot_id": bot_id, "callback_query_id": str(query["id"])}
        return Message("telegram", "callback_answer", {**body, "text": text})
    if isinstance(payload.get("replyToken"), str) and payload["replyToken"]:
        return Message(
            "line", "callback_answer", {"reply_token": payload["replyToken"], "text": text}
        )
    return None


def decide(engine: Engine, project_id: str, channel: str, event: InboundEvent) -> ChatDecision:
    """Take the decision a button press carries: what to tell the provider, and what to send
    after that."""
    press = button_press(channel, event)
    assert press is not None
    decision, token = press
    with engine.connect() as conn:
        if dedupe.seen(conn, project_id, channel, event.provider_event_id):
            return ChatDecision({"status": "duplicate", "event": event.provider_event_id})
    answer = _answer(channel, event, "Approved." if decision == "approve" else "Rejected.")
    try:
        decided = approvals.decide(
            engine,
            project_id,
            token,
            decision,
            _caller(channel, _object(event.payload)),
            extra_messages=[answer] if answer else [],
        )
    except approvals.DecisionRefused as refused:
        refusal = _answer(channel, event, _REFUSALS[refused.reason])
        with engine.connect() as conn:
            ids = outbox.add(conn, project_id, None, [refusal] if refusal else [])
        refused_answer = {
            "status": "refused",
            "reason": refused.reason,
            "event": event.provider_event_id,
        }
        return ChatDecision(refused_answer, messages=list(ids))
    with engine.connect() as conn:
        dedupe.record(
            conn,
            project_id,
            channel,
            event.provider_event_id,
            decided.run_id,
            event.request_digest,
        )
    taken = {
        "status": "approved" if decision == "approve" else "rejected",
        "run_id": str(decided.run_id),
        "event": event.provider_event_id,
    }
    return ChatDecision(taken, runs=[decided.run_id], messages=list(decided.message_ids))
