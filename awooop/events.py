"""What a step reads: the run's input and each built-in channel's event, as typed dicts.

A run's input is what admission stored (:class:`RunInput`): the channel, the provider's event
id, the event as the provider sent it, channel facts that are not in the body (``meta``) and
the project's configuration when the event arrived. Read the event through the helper of
its channel; it checks the run came from that channel::

    from awooop import events
    from awooop.domain.workflow import StepContext

    def triage(ctx: StepContext) -> dict[str, object]:
        notification = events.alertmanager_event(ctx)
        names = {a["labels"].get("alertname", "?") for a in notification["alerts"]}
        return {"status": notification["status"], "alertnames": sorted(names)}

The fields are the providers' own names. Fields a provider may leave out are optional
(``.get()``); the required ones are those admission checked before the run was created, or
that the provider documents as always present. Nothing here validates a payload: a type
checker trusts these shapes, the running code reads what was sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, cast

if TYPE_CHECKING:
    from awooop.domain.workflow import StepContext

# Where a run's event came from: a built-in channel, "schedule" (a tick of the workflow's
# schedule), or "internal" (a run AwoooP started itself, e.g. the compensation of a late
# tool result).
Channel = Literal["telegram", "alertmanager", "gitea", "line", "api", "schedule", "internal"]


# --- Alertmanager (the webhook receiver's payload, version 4) --------------------------------


class AlertmanagerAlert(TypedDict):
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str]
    startsAt: str  # RFC 3339
    endsAt: str  # RFC 3339; "0001-01-01T00:00:00Z" while firing with no end known
    generatorURL: str
    fingerprint: str


class AlertmanagerNotification(TypedDict):
    receiver: str
    status: Literal["firing", "resolved"]
    alerts: list[AlertmanagerAlert]
    groupKey: str
    version: NotRequired[str]
    truncatedAlerts: NotRequired[int]
    groupLabels: NotRequired[dict[str, str]]
    commonLabels: NotRequired[dict[str, str]]
    commonAnnotations: NotRequired[dict[str, str]]
    externalURL: NotRequired[str]


# --- Telegram (a Bot API Update) ----------------------------------------------------------


class TelegramUser(TypedDict, total=False):
    id: int
    is_bot: bool
    first_name: str
    last_name: str
    username: str
    language_code: str


class TelegramChat(TypedDict, total=False):
    id: int
    type: Literal["private", "group", "supergroup", "channel"]
    title: str
    username: str


# ``from`` is a Python keyword: these two use the functional syntax.
TelegramMessage = TypedDict(
    "TelegramMessage",
    {
        "message_id": int,
        "date": int,
        "chat": TelegramChat,
        "from": TelegramUser,
        "text": str,
        "caption": str,
        "reply_to_message": dict[str, Any],
    },
    total=False,
)
TelegramCallbackQuery = TypedDict(
    "TelegramCallbackQuery",
    {
        "id": str,
        "from": TelegramUser,
        "message": TelegramMessage,
        "chat_instance": str,
        "data": str,
    },
    total=False,
)


class TelegramUpdate(TypedDict):
    update_id: int
    message: NotRequired[TelegramMessage]
    edited_message: NotRequired[TelegramMessage]
    channel_post: NotRequired[TelegramMessage]
    edited_channel_post: NotRequired[TelegramMessage]
    callback_query: NotRequired[TelegramCallbackQuery]


# --- Gitea (webhook payloads; which one is in meta["event_type"]) ---------------------------


class GiteaUser(TypedDict, total=False):
    id: int
    login: str
    full_name: str
    email: str
    username: str


class GiteaRepository(TypedDict, total=False):
    id: int
    name: str
    full_name: str
    html_url: str
    clone_url: str
    default_branch: str
    private: bool
    owner: GiteaUser


class GiteaCommit(TypedDict, total=False):
    id: str
    message: str
    url: str
    author: dict[str, str]  # name, email, username
    timestamp: str


class GiteaIssue(TypedDict, total=False):
    id: int
    number: int
    title: str
    body: str
    state: Literal["open", "closed"]
    html_url: str
    user: GiteaUser


class GiteaPullRequest(GiteaIssue, total=False):
    merged: bool
    head: dict[str, Any]  # ref, sha, repo
    base: dict[str, Any]


class GiteaComment(TypedDict, total=False):
    id: int
    body: str
    html_url: str
    user: GiteaUser


class GiteaEvent(TypedDict, total=False):
    """Push, pull request, issue, issue comment and release payloads share these names; each
    carries only its own (a push has ``ref``/``commits``, a pull request ``pull_request``)."""

    action: str  # opened, closed, reopened, edited, created, … (not on push)
    number: int
    ref: str
    before: str
    after: str
    compare_url: str
    commits: list[GiteaCommit]
    pusher: GiteaUser
    repository: GiteaRepository
    sender: GiteaUser
    issue: GiteaIssue
    pull_request: GiteaPullRequest
    comment: GiteaComment
    release: dict[str, Any]


# --- LINE (one event of a Messaging API webhook) --------------------------------------------


class LineSource(TypedDict, total=False):
    type: Literal["user", "group", "room"]
    userId: str
    groupId: str
    roomId: str


class LineMessage(TypedDict, total=False):
    id: str
    type: str  # text, image, sticker, …
    text: str
    quoteToken: str


class LinePostback(TypedDict, total=False):
    data: str
    params: dict[str, str]


class LineEvent(TypedDict):
    webhookEventId: str
    type: NotRequired[str]  # message, postback, follow, unfollow, join, leave, …
    mode: NotRequired[Literal["active", "standby"]]
    timestamp: NotRequired[int]  # milliseconds since the epoch
    source: NotRequired[LineSource]
    replyToken: NotRequired[str]
    deliveryContext: NotRequired[dict[str, bool]]  # {"isRedelivery": …}
    message: NotRequired[LineMessage]
    postback: NotRequired[LinePostback]


# --- The JSON API (``POST …/runs``): the caller's own JSON object ---------------------------

ApiEvent = dict[str, Any]


# --- A tick of a workflow's schedule ----------------------------------------------------------


class ScheduleTick(TypedDict):
    workflow: str
    schedule: str  # the cron expression
    tick: str  # the tick's time, ISO 8601 in UTC


ChannelEvent = (
    AlertmanagerNotification | TelegramUpdate | GiteaEvent | LineEvent | ScheduleTick | ApiEvent
)


class RunMeta(TypedDict, total=False):
    event_type: str  # gitea: the X-Gitea-Event header ("push", "pull_request", …)
    destination: str | None  # line: the bot's user id the webhook was sent to
    workflow: str  # api: the workflow a start request named
    version: int  # api: the version it asked for, if any


class SignalReceived(TypedDict):
    """The output of a wait step that took its signal (``ctx.outputs[step]``); a wait that
    went on without it (``on_timeout="continue"``) has only ``signal`` and ``received``."""

    signal: str
    received: bool
    signal_id: NotRequired[str]
    seq: NotRequired[int]
    payload: NotRequired[dict[str, Any]]


class RunInput(TypedDict):
    """A run's input as admission stores it (``ctx.input``)."""

    channel: Channel
    provider_event_id: str
    event: ChannelEvent
    meta: RunMeta
    # The project's configuration when the event arrived (absent on runs started internally).
    project: NotRequired[dict[str, Any]]


class WrongChannel(TypeError):
    """A step read the event of one channel from a run that came from another (a route to
    the wrong workflow). Not retried unless the step's retry policy says so."""


def run_input(ctx: StepContext) -> RunInput:
    """``ctx.input`` as the :class:`RunInput` admission stored."""
    return cast(RunInput, ctx.input)


def _event(ctx: StepContext, channel: Channel) -> Any:
    stored = run_input(ctx)
    if stored.get("channel") != channel:
        raise WrongChannel(
            f"step {ctx.step} reads a {channel} event, but run {ctx.run_id} came from "
            f"{stored.get('channel')!r}"
        )
    return stored["event"]


def alertmanager_event(ctx: StepContext) -> AlertmanagerNotification:
    return cast(AlertmanagerNotification, _event(ctx, "alertmanager"))


def telegram_event(ctx: StepContext) -> TelegramUpdate:
    return cast(TelegramUpdate, _event(ctx, "telegram"))


def gitea_event(ctx: StepContext) -> GiteaEvent:
    """The payload; which kind it is (push, pull_request, …) is ``ctx.meta["event_type"]``."""
    return cast(GiteaEvent, _event(ctx, "gitea"))


def line_event(ctx: StepContext) -> LineEvent:
    return cast(LineEvent, _event(ctx, "line"))


def api_event(ctx: StepContext) -> ApiEvent:
    """The JSON object a client sent: the ``input`` of a start request, or the whole body."""
    return cast(ApiEvent, _event(ctx, "api"))


def schedule_event(ctx: StepContext) -> ScheduleTick:
    return cast(ScheduleTick, _event(ctx, "schedule"))


def signal_received(ctx: StepContext, step: str) -> SignalReceived:
    """What the wait step ``step`` (an earlier one) received."""
    return cast(SignalReceived, ctx.outputs[step])
