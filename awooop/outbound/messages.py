"""What a run says, and to whom: reply targets from the event that started the run, and the
outbox messages for an approval prompt, a decision and a run's outcome.

A message is data (``payload``) an adapter in :mod:`awooop.outbound.adapters` turns into a
provider call. The only secret a message may carry, an approval token, goes in ``sealed``
(encrypted with ``AWOOOP_SECRET_KEY``); the payload never holds one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

# Button data: the decision and the token. 3 + 43 bytes fits Telegram's 64-byte
# callback_data (and LINE's 300-character postback data).
APPROVE_PREFIX = "ap:"
REJECT_PREFIX = "rj:"


@dataclass(frozen=True)
class Message:
    channel: str  # the adapter: telegram, line, gitea, webhook
    purpose: str  # approval_prompt, approval_decision, callback_answer, run_outcome
    payload: dict[str, Any]
    sealed: str | None = None  # the encrypted approval token, for the buttons

    def row(self) -> dict[str, Any]:
        return asdict(self)


def _get(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _telegram_chat(event: Any) -> Any:
    for kind in ("message", "edited_message", "channel_post"):
        chat_id = _get(event, kind, "chat", "id")
        if chat_id is not None:
            return chat_id
    return _get(event, "callback_query", "message", "chat", "id")


def _gitea_target(event: Any, config: Mapping[str, Any]) -> dict[str, Any] | None:
    repo = _get(event, "repository", "full_name")
    index = _get(event, "issue", "number") or _get(event, "pull_request", "number")
    if not isinstance(repo, str) or not isinstance(index, int):
        return None
    base = config.get("gitea_url")
    html_url = _get(event, "repository", "html_url")
    if not base and isinstance(html_url, str) and html_url.endswith("/" + repo):
        base = html_url[: -len(repo) - 1]
    if not isinstance(base, str) or urlsplit(base).scheme not in ("http", "https"):
        return None
    return {"channel": "gitea", "base_url": base.rstrip("/"), "repo": repo, "index": index}


def reply_targets(run_input: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Where a run's messages go: the chat (or issue) the event came from, then the
    project's configured ops chat and webhook (``notify_telegram_chat``, ``notify_line_to``,
    ``notify_url``). Each target once."""
    channel = run_input.get("channel")
    event = run_input.get("event")
    config = run_input.get("project") or {}
    targets: list[dict[str, Any]] = []
    if channel == "telegram":
        chat_id = _telegram_chat(event)
        bot_id = str(run_input.get("provider_event_id", "0")).split(":", 1)[0]
        if chat_id is not None:
            targets.append({"channel": "telegram", "bot_id": bot_id, "chat_id": chat_id})
    elif channel == "line":
        source = _get(event, "source") or {}
        to = source.get("groupId") or source.get("roomId") or source.get("userId")
        if isinstance(to, str):
            targets.append({"channel": "line", "to": to})
    elif channel == "gitea":
        target = _gitea_target(event, config)
        if target:
            targets.append(target)
    if config.get("notify_telegram_chat") not in (None, ""):
        ops = {
            "channel": "telegram",
            "bot_id": str(config.get("notify_telegram_bot", "0")),
            "chat_id": config["notify_telegram_chat"],
        }
        if not any(t.get("chat_id") == ops["chat_id"] for t in targets):
            targets.append(ops)
    if isinstance(config.get("notify_line_to"), str):
        ops = {"channel": "line", "to": config["notify_line_to"]}
        if ops not in targets:
            targets.append(ops)
    if isinstance(config.get("notify_url"), str):
        targets.append({"channel": "webhook", "url": config["notify_url"]})
    return targets


def approval_prompt(
    targets: list[dict[str, Any]],
    *,
    run_id: str,
    step: str,
    action: str,
    prompt: str,
    ttl_seconds: float,
    sealed_token: str,
    decide_url: str | None,
) -> list[Message]:
    """The prompt with Approve / Reject buttons wherever buttons exist. Gitea has none: its
    comment only says the run waits (the token never goes into a repository)."""
    minutes = max(1, round(ttl_seconds / 60))
    text = f"Approval needed: {action}\n\n{prompt}\n\nExpires in {minutes} min. Run {run_id}."
    messages = []
    for target in targets:
        kind = target["channel"]
        if kind in ("telegram", "line"):
            payload = {**target, "method": "send", "text": text, "buttons": True}
            messages.append(Message(kind, "approval_prompt", payload, sealed_token))
        elif kind == "gitea":
            note = f"{text}\n\nDecide in the ops chat or through the AwoooP API."
            messages.append(Message(kind, "approval_prompt", {**target, "text": note}))
        elif kind == "webhook":
            body = {
                "type": "approval.requested",
                "run_id": run_id,
                "step": step,
                "action": action,
                "prompt": prompt,
                "expires_in_seconds": ttl_seconds,
            }
            payload = {**target, "body": body, "decide_url": decide_url}
            messages.append(Message(kind, "approval_prompt", payload, sealed_token))
    return messages


def text_messages(
    targets: list[dict[str, Any]], purpose: str, text: str, body: dict[str, Any]
) -> list[Message]:
    """A plain message to every target (a decision, a run's outcome)."""
    messages = []
    for target in targets:
        if target["channel"] == "webhook":
            messages.append(Message("webhook", purpose, {**target, "body": body}))
        else:
            messages.append(Message(target["channel"], purpose, {**target, "text": text}))
    return messages


def decision_messages(
    targets: list[dict[str, Any]], *, run_id: str, action: str, decision: str, actor: str
) -> list[Message]:
    text = {
        "approved": f"Approved by {actor}: {action}. Run {run_id} continues.",
        "rejected": f"Rejected by {actor}: {action}. Run {run_id} is undoing its steps.",
        "expired": f"Nobody approved {action} in time. Run {run_id} is undoing its steps.",
    }[decision]
    body = {"type": f"approval.{decision}", "run_id": run_id, "action": action, "by": actor}
    return text_messages(targets, "approval_decision", text, body)


def outcome_messages(
    targets: list[dict[str, Any]], *, run_id: str, status: str, failure_code: str | None
) -> list[Message]:
    suffix = f" ({failure_code})" if failure_code else ""
    text = f"Run {run_id} finished: {status}{suffix}."
    body = {"type": "run.finished", "run_id": run_id, "status": status, "code": failure_code}
    return text_messages(targets, "run_outcome", text, body)


def parse_button(data: str) -> tuple[str, str] | None:
    """``("approve" | "reject", token)`` from button data, None if it is not ours."""
    for prefix, decision in ((APPROVE_PREFIX, "approve"), (REJECT_PREFIX, "reject")):
        if data.startswith(prefix) and 20 <= len(data) - len(prefix) <= 64:
            return decision, data[len(prefix) :]
    return None
