"""One module per source, each with the same surface::

    CHANNEL: str
    authenticate(request: RawRequest, secrets: ChannelSecrets) -> bool
    parse(request: RawRequest) -> list[InboundEvent]     # raises errors.MalformedRequest

Authentication always runs on the raw body, before parsing.
"""

from awooop.channels import alertmanager, api, gitea, line, telegram
from awooop.channels.base import ChannelModule

CHANNELS: dict[str, ChannelModule] = {
    m.CHANNEL: m for m in (telegram, alertmanager, gitea, line, api)
}
