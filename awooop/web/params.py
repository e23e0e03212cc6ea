"""Query parameters of the runs API: validation and opaque page cursors.

Anything a client gets wrong here is a 400 ``E-REQUEST-001`` naming the parameter: an
unknown parameter, a bad value, a limit out of range, a cursor this list did not issue (for
this project, with these filters).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from werkzeug.datastructures import MultiDict

from awooop import errors
from awooop.channels.api import MAX_KEY_LENGTH
from awooop.channels.base import MAX_EVENT_ID_LENGTH
from awooop.domain import states, tags
from awooop.domain.numbers import whole_number
from awooop.models.project import RUN_CHANNEL_TYPES
from awooop.store.queries import (
    MAX_FAILURE_CODE,
    OUTBOX_FILTER_STATUSES,
    RunFilters,
    RunPosition,
)

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_CURSOR_LENGTH = 512
# The run list's filters, the same in the runs API and the console's run list.
RUN_FILTERS = (
    "status",
    "saga_status",
    "workflow",
    "channel",
    "created_from",
    "created_until",
    "finished_from",
    "finished_until",
    "failure_code",
    "outbox",
)


# Finding runs: by the event they were admitted with, by the key they were started with, by
# the tags their steps set (``tag=key:value``, repeatable, all must match). The runs API's
# list takes these besides :data:`RUN_FILTERS`.
FIND_FILTERS = ("provider_event_id", "idempotency_key", "tag")


def run_filters(args: MultiDict[str, str]) -> RunFilters:
    """The runs list's filters (:data:`RUN_FILTERS` and :data:`FIND_FILTERS`) in ``args``,
    each checked; the caller checked that ``args`` names nothing else."""
    return RunFilters(
        statuses=choices(args, "status", states.RUN_STATUSES),
        saga_statuses=choices(args, "saga_status", states.SAGA_STATUSES),
        workflow=text_value(args, "workflow"),
        channel=choice(args, "channel", RUN_CHANNEL_TYPES),
        created_from=timestamp(args, "created_from"),
        created_until=timestamp(args, "created_until"),
        finished_from=timestamp(args, "finished_from"),
        finished_until=timestamp(args, "finished_until"),
        failure_code=text_value(args, "failure_code", MAX_FAILURE_CODE),
        outbox=choice(args, "outbox", OUTBOX_FILTER_STATUSES),
        provider_event_id=text_value(args, "provider_event_id", MAX_EVENT_ID_LENGTH),
        idempotency_key=text_value(args, "idempotency_key", MAX_KEY_LENGTH),
        tags=tag_filter(args),
    )


def tag_filter(args: MultiDict[str, str]) -> dict[str, str] | None:
    """``tag=key:value`` (repeatable): the tags a run must all have; None without any."""
    found: dict[str, str] = {}
    raws = args.getlist("tag")
    if len(raws) > tags.MAX_TAGS:
        raise bad(f"at most {tags.MAX_TAGS} tag filters (a run has at most {tags.MAX_TAGS} tags)")
    for raw in raws:
        key, colon, value = raw.partition(":")
        problem = tags.key_problem(key) or tags.value_problem(key, value)
        if not colon or problem:
            raise bad(f"tag must be KEY:VALUE, e.g. service:db-1; {problem or 'no colon'}")
        if key in found:
            raise bad(f"tag {key} is given more than once (a run has one value per tag)")
        found[key] = value
    return found or None


def bad(message: str) -> errors.MalformedRequest:
    return errors.MalformedRequest(message)


def check_known(
    args: MultiDict[str, str], allowed: Collection[str], what: str = "query parameter"
) -> None:
    """A 400 naming the first of ``args`` not ``allowed``; ``what`` the args are called."""
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        raise bad(f"unknown {what} {unknown[0]!r}; allowed: {', '.join(allowed)}")


def single(args: MultiDict[str, str], name: str) -> str | None:
    values = args.getlist(name)
    if len(values) > 1:
        raise bad(f"query parameter {name!r} is given more than once")
    return values[0] if values else None


def limit(args: MultiDict[str, str]) -> int:
    raw = single(args, "limit")
    if raw is None:
        return DEFAULT_LIMIT
    number = whole_number(raw)
    if number is None or not 1 <= number <= MAX_LIMIT:
        raise bad(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return number


def choices(args: MultiDict[str, str], name: str, allowed: Collection[str]) -> tuple[str, ...]:
    """A comma-separated (or repeated) parameter whose every value is one of ``allowed``."""
    values = [v.strip() for raw in args.getlist(name) for v in raw.split(",")]
    for value in values:
        if value not in allowed:
            raise bad(f"{name} {value[:64]!r} is not one of: {', '.join(allowed)}")
    return tuple(dict.fromkeys(values))


def choice(args: MultiDict[str, str], name: str, allowed: Collection[str]) -> str | None:
    raw = single(args, name)
    if raw is not None and raw not in allowed:
        raise bad(f"{name} {raw[:64]!r} is not one of: {', '.join(allowed)}")
    return raw


def text_value(args: MultiDict[str, str], name: str, max_length: int = 128) -> str | None:
    raw = single(args, name)
    if raw is None:
        return None
    if not 0 < len(raw) <= max_length or not raw.isprintable():
        raise bad(f"{name} must be 1 to {max_length} printable characters")
    return raw


def timestamp(args: MultiDict[str, str], name: str) -> datetime | None:
    """An ISO 8601 instant with a UTC offset, e.g. ``2026-11-29T10:00:00Z``."""
    raw = single(args, name)
    if raw is None:
        return None
    try:
        return instant(raw)
    except ValueError:
        # A '+' typed into a URL reaches us as a space (form encoding).
        hint = "; a '+' in a query string must be sent as %2B" if " " in raw else ""
        raise bad(
            f"{name} must be an ISO 8601 time with a UTC offset, e.g. 2026-11-29T10:00:00Z" + hint
        ) from None


def instant(raw: str) -> datetime:
    """An ISO 8601 time with an offset, in UTC: PostgreSQL takes offsets up to 15:59 only,
    Python's up to 23:59. ValueError if it is none, or out of range in UTC."""
    value = datetime.fromisoformat(raw)
    if value.tzinfo is None:
        raise ValueError("no UTC offset")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:59-01:00
        raise ValueError("out of range") from None


# Cursors are opaque to clients: base64url JSON naming the list they belong to (``k``) and what that
# list was (``b``: a digest of the project and the filters, see :func:`list_scope`; the API's lists
# and the console's pages alike). A cursor is only taken by the list that issued it, with the same
# filters: another list's, another project's or another filter's cursor is a 400. They are not
# signed: a client can forge one, but a cursor only says where a page starts — every query is scoped
# by the caller's project and the request's own filters, never the cursor's.


def list_scope(kind: str, project_id: str, args: Mapping[str, Any] | None = None) -> str:
    """What a cursor of the list ``kind`` is bound to: the project and ``args`` (the list's
    filters, or e.g. the run of an audit trail) — a short digest, the same for the same
    parameters in any order."""
    pairs: list[tuple[str, str]] = []
    if isinstance(args, MultiDict):
        pairs = sorted((str(k), str(v)) for k, v in args.items(multi=True))
    elif args is not None:
        pairs = sorted((str(k), str(v)) for k, v in args.items())
    canonical = json.dumps([kind, project_id, pairs], separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:_SCOPE_LENGTH]


_SCOPE_LENGTH = 22


def events_scope(project_id: str, run_id: str) -> str | None:
    """What a cursor of one run's audit trail is bound to: the project and the run. None for a
    run id that is not a UUID: its cursor is still read (a malformed one is a 400, as for any
    list) before the run id is answered 404."""
    try:
        parsed = uuid.UUID(run_id)
    except ValueError:
        return None
    return list_scope("events", project_id, {"run": str(parsed)})


def encode_cursor(kind: str, position: Mapping[str, Any], scope: str | None = None) -> str:
    bound = {"b": scope} if scope is not None else {}
    raw = json.dumps({"k": kind, **bound, **position}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(
    args: MultiDict[str, str], kind: str, scope: str | None = None
) -> dict[str, Any] | None:
    """The position in ``args``' cursor; None without one. With ``scope``, the cursor must
    have been issued with it (:func:`list_scope`): the same list, project and filters."""
    raw = single(args, "cursor")
    if raw is None:
        return None
    try:
        if len(raw) > MAX_CURSOR_LENGTH:
            raise ValueError
        data = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        if not isinstance(data, dict) or data.pop("k", None) != kind:
            raise ValueError
        bound = data.pop("b", None)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise bad("cursor is not one this list returned; start again without it") from None
    if scope is not None and bound != scope:
        raise bad(
            "cursor is not one this list returned with these filters (pass the same filters "
            "as the page that named it); start again without it"
        )
    return data


def run_position(data: dict[str, Any] | None) -> RunPosition | None:
    """The (created_at, run_id) keyset of a run-list cursor."""
    if data is None:
        return None
    try:
        created_at = instant(data["t"])
        run_id = uuid.UUID(data["r"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise bad("cursor is not one this list returned; start again without it") from None
    return RunPosition(created_at, run_id)


def run_cursor(kind: str, row: Mapping[str, Any], scope: str | None = None) -> str:
    position = {"t": row["created_at"].isoformat(), "r": str(row["run_id"])}
    return encode_cursor(kind, position, scope)


def seq_position(data: dict[str, Any] | None) -> int:
    if data is None:
        return 0
    seq = data.get("s")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise bad("cursor is not one this list returned; start again without it")
    return seq
