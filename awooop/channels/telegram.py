"""Telegram Bot API webhook updates.

Authentication: the ``X-Telegram-Bot-Api-Secret-Token`` header set with ``setWebhook``,
compared in constant time against the stored hashes. Event id: ``<bot id>:<update_id>``,
because update ids restart from a random value after a week without updates. The bot id is
the numeric prefix of the bot token, given as ``?bot_id=`` on the webhook URL (``0`` when a
project has a single bot and leaves it out).
"""

from __future__ import annotations

import re

from awooop import secrets as crypto
from awooop.channels.base import (
    ChannelSecrets,
    InboundEvent,
    RawRequest,
    digest,
    event_id,
    json_object,
    require,
)

CHANNEL = "telegram"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 - a header name
# ASCII digits only: str.isdigit() also takes other scripts' digits ("\u0661" is read as 1 by
# int()), which would give one bot a second dedupe key for the same update.
BOT_ID = re.compile(r"[0-9]{1,20}")


def authenticate(request: RawRequest, secrets: ChannelSecrets) -> bool:
    presented = request.headers.get(SECRET_HEADER)
    return bool(presented) and crypto.matches_any_hash(presented or "", secrets.hashes)


def parse(request: RawRequest) -> list[InboundEvent]:
    update = json_object(request.body)
    update_id = update.get("update_id")
    require(
        isinstance(update_id, int) and not isinstance(update_id, bool),
        "update_id must be an integer",
    )
    bot_ids = request.query.get("bot_id", ["0"])
    # The bot id is part of the event key: of two values, neither can be taken.
    require(len(bot_ids) == 1, "query parameter 'bot_id' is given more than once")
    bot_id = bot_ids[0]
    require(
        BOT_ID.fullmatch(bot_id) is not None,
        "bot_id must be the bot's numeric id (1 to 20 ASCII digits)",
    )
    return [InboundEvent(event_id(f"{bot_id}:{update_id}"), update, digest(update))]
