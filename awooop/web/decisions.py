"""Approval decisions that arrive as chat events: a Telegram ``callback_query`` from an
inline keyboard button, a LINE ``postback``. Ingress hands such events here instead of
starting a run. Each is deduplicated like any update (a replayed update is a duplicate, not a
second decision) and always answered 200, so the provider does not redeliver it; the person
who pressed the button gets an answer in the chat.
"""

from __future__ import annotations

from typing import Any

from awooop.channels.base import InboundEvent
from awooop.engine import approvals
from awooop.outbound.messages import Message, parse_button
from awooop.store import dedupe, outbox
from awooop.web import context

_REFUSALS = {
    "not_found": "This approval is not known here.",
    "forbidden": "You may not decide this approval.",
    "expired": "This approval has expired.",
    "used": "This approval was already decided.",
    "not_waiting": "The run no longer waits for this approval.",
}


def button_press(channel: str, event: InboundEvent) -> tuple[str, str] | None:
    """``(decision, token)`` when the event is one of our approval buttons being pressed."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    if channel == "telegram":
        data = (payload.get("callback_query") or {}).get("data")
    elif channel == "line" and payload.get("type") == "postback":
        data = (payload.get("postback") or {}).get("data")
    else:
        return None
    return parse_button(data) if isinstance(data, str) else None


def _caller(channel: str, payload: dict[str, Any]) -> approvals.Caller:
    if channel == "telegram":
        query = payload.get("callback_query") or {}
        user = query.get("from") or {}
        chat = ((query.get("message") or {}).get("chat") or {}).get("id")
        name = user.get("username") or user.get("id")
        return approvals.Caller(
            via="telegram",
            actor=f"telegram:{name}",
            user_id=str(user.get("id")),
            chat_id=None if chat is None else str(chat),
        )
    source = payload.get("source") or {}
    user_id = source.get("userId")
    chat = source.get("groupId") or source.get("roomId") or user_id
    return approvals.Caller(via="line", actor=f"line:{user_id}", user_id=user_id, chat_id=chat)


def _answer(channel: str, event: InboundEvent, text: str) -> Message | None:
    """The reply to the person who pressed: Telegram's answerCallbackQuery, a LINE reply."""
    payload = event.payload
    if channel == "telegram":
        query = payload.get("callback_query") or {}
        if "id" not in query:
            return None
        bot_id = event.provider_event_id.split(":", 1)[0]
        body = {"method": "answer", "bot_id": bot_id, "callback_query_id": str(query["id"])}
        return Message("telegram", "callback_answer", {**body, "text": text})
    if payload.get("replyToken"):
        return Message(
            "line", "callback_answer", {"reply_token": payload["replyToken"], "text": text}
        )
    return None


def decide(project_id: str, channel: str, event: InboundEvent) -> dict[str, Any]:
    """Take the decision a button press carries; what to tell the provider."""
    press = button_press(channel, event)
    assert press is not None
    decision, token = press
    engine = context.engine()
    with engine.connect() as conn:
        if dedupe.seen(conn, project_id, channel, event.provider_event_id):
            return {"status": "duplicate", "event": event.provider_event_id}
    answer = _answer(channel, event, "Approved." if decision == "approve" else "Rejected.")
    try:
        decided = approvals.decide(
            engine,
            project_id,
            token,
            decision,
            _caller(channel, event.payload),
            extra_messages=[answer] if answer else [],
        )
    except approvals.DecisionRefused as refused:
        refusal = _answer(channel, event, _REFUSALS[refused.reason])
        with engine.connect() as conn:
            ids = outbox.add(conn, project_id, None, [refusal] if refusal else [])
        context.notify(ids)
        return {"status": "refused", "reason": refused.reason, "event": event.provider_event_id}
    with engine.connect() as conn:
        dedupe.record(
            conn,
            project_id,
            channel,
            event.provider_event_id,
            decided.run_id,
            event.request_digest,
        )
    context.enqueue([decided.run_id])
    context.notify(decided.message_ids)
    return {
        "status": "approved" if decision == "approve" else "rejected",
        "run_id": str(decided.run_id),
        "event": event.provider_event_id,
    }
