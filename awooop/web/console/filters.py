"""The runs list's filters read from a query or a form (the runs page, bulk actions)."""

from __future__ import annotations

from datetime import UTC, datetime

from werkzeug.datastructures import MultiDict

from awooop.channels.api import MAX_KEY_LENGTH
from awooop.channels.base import MAX_EVENT_ID_LENGTH
from awooop.domain import states
from awooop.models.project import RUN_CHANNEL_TYPES
from awooop.store import queries
from awooop.web import params

# The list's filters and the ways to find runs (an event id, an Idempotency-Key, tags).
FILTERS = (*params.RUN_FILTERS, *params.FIND_FILTERS)


def _time(args: MultiDict[str, str], name: str) -> datetime | None:
    """An ISO 8601 time; without an offset (a ``datetime-local`` field) it is UTC."""
    raw = params.single(args, name)
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise params.bad(f"{name} must be a time like 2026-11-29T10:00 (UTC)") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def run_filters(args: MultiDict[str, str]) -> queries.RunFilters:
    params.check_known(args, (*FILTERS, "cursor"))
    return queries.RunFilters(
        statuses=params.choices(args, "status", states.RUN_STATUSES),
        saga_statuses=params.choices(args, "saga_status", states.SAGA_STATUSES),
        workflow=params.text_value(args, "workflow"),
        channel=params.choice(args, "channel", RUN_CHANNEL_TYPES),
        created_from=_time(args, "created_from"),
        created_until=_time(args, "created_until"),
        finished_from=_time(args, "finished_from"),
        finished_until=_time(args, "finished_until"),
        failure_code=params.text_value(args, "failure_code", queries.MAX_FAILURE_CODE),
        outbox=params.choice(args, "outbox", queries.OUTBOX_FILTER_STATUSES),
        provider_event_id=params.text_value(args, "provider_event_id", MAX_EVENT_ID_LENGTH),
        idempotency_key=params.text_value(args, "idempotency_key", MAX_KEY_LENGTH),
        tags=params.tag_filter(args),
    )
