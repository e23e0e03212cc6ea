"""Rerunning finished runs: one, or every run a runs-list filter matches, at a bounded rate.

A rerun is a new run with the original's input, channel, workflow and version (the version
as registered now: a version no longer registered is refused, ``E-WORKFLOW-002``). It is
linked both ways (``rerun_of`` on the new run; the original's detail lists its reruns) and
is not an admission of the provider's event: the event's dedupe row is neither used nor
changed. The request's ``Idempotency-Key`` is its identity: the same key again answers
with the runs it made (a duplicate), the same key with another request is refused
(``E-IDEMPOTENT-002``). Only a finished run (COMPLETED, FAILED, CANCELLED) is rerun; one
that is not is refused (``E-RERUN-001``) when named, and not matched by a bulk filter.

**Pacing.** A bulk rerun's new runs become claimable one ``1 / rate`` seconds after another:
the *n*-th (from 0) gets ``available_at = now + n / rate``. Claims never take a run before
its ``available_at`` (the claim statement checks it, as it does for retry back-off), so at
most ``rate`` of them can start in any second whatever the number of workers, messages
or orphan sweeps — the bound is in the database, not in when messages are sent. The first
is nudged at once by the caller; each later one has a ``start`` timer due at its
``available_at`` that the due-timer sweep turns into its nudge (the orphan sweep is the
backstop, as for every run). Simpler than admitting in batches from a sweep, and it needs
no state besides the runs themselves.

The web endpoints and the console call :func:`rerun_run` and :func:`rerun_matching`; the
caller checks the role, sends the nudges (:attr:`Reruns.due_now`) after this returns.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, Engine

from awooop import db, errors
from awooop.domain import states
from awooop.store import queries, reruns
from awooop.workflows import registry

log = logging.getLogger("awooop.engine.reruns")

# A bulk rerun: runs per request (default, most).
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_REASON = 1000
# The slowest pace a bulk rerun may ask for (new runs claimable per second): the last of
# MAX_LIMIT runs then waits under a day, not until a date the database cannot hold.
MIN_RATE = 0.02


@dataclass(frozen=True)
class Reruns:
    """What a rerun request did: the runs it made (``created``) or made before under the same
    key (a duplicate: ``created`` False)."""

    runs: list[reruns.Rerun]
    created: bool

    @property
    def due_now(self) -> list[uuid.UUID]:
        """The new runs claimable at once (the caller nudges them; the rest have timers)."""
        if not self.created or not self.runs:
            return []
        first = self.runs[0].available_at
        return [r.run_id for r in self.runs if r.available_at <= first]


@dataclass(frozen=True)
class Matching:
    """The finished runs a bulk request's filter matches, newest first, at most ``limit``;
    ``more``: more match than that (``after`` continues from the last one)."""

    originals: list[dict[str, Any]]
    more: bool
    after: queries.RunPosition | None


def _definition(name: str, version: int) -> Any:
    try:
        return registry.get(name, version)
    except registry.UnknownWorkflow:
        raise errors.WorkflowVersionUnknown(
            f"workflow {name} v{version} is no longer registered: its runs cannot be rerun"
        ) from None


def _previous(conn: Connection, project_id: str, key: str, request_digest: str) -> Reruns | None:
    """What the request ``key`` made before, if it was made (the same request: a duplicate;
    another request with the key: ``E-IDEMPOTENT-002``)."""
    made = reruns.by_key(conn, project_id, key)
    if not made:
        return None
    if any(r.request_digest != request_digest for r in made):
        raise errors.IdempotencyKeyReused(
            "this Idempotency-Key was already used for another rerun request"
        )
    return Reruns(made, created=False)


# Retry-After of a rerun refused by the active-run quota (the caller may say otherwise).
QUOTA_RETRY_AFTER_SECONDS = 30


def _check_quota(conn: Connection, project_id: str, adding: int, quota: int | None) -> None:
    if quota is None or adding == 0:
        return
    active = reruns.active_runs(conn, project_id, quota)
    if active + adding > quota:
        raise errors.ActiveRunQuotaExceeded(
            QUOTA_RETRY_AFTER_SECONDS,
            f"this project may have {quota} active runs at a time and has {active}; "
            f"rerunning {adding} would pass it",
        )


def _new(run_id: uuid.UUID, name: str, version: int, delay: float) -> reruns.NewRerun:
    workflow = _definition(name, version)
    return reruns.NewRerun(
        rerun_of=run_id,
        workflow_digest=workflow.digest,
        max_attempts=workflow.max_attempts,
        deadline_seconds=workflow.deadline_seconds,
        delay_seconds=delay,
    )


def rerun_run(
    engine: Engine,
    project_id: str,
    run_id: uuid.UUID,
    *,
    key: str,
    request_digest: str,
    actor: str,
    reason: str = "",
    max_active_runs: int | None = None,
) -> Reruns:
    """Rerun one finished run of the project, claimable at once. 404 for no such run, 409
    ``E-RERUN-001`` for an unfinished one, 422 for a version no longer registered, 429 over
    the active-run quota; a duplicate answers the run the key made."""
    with db.transaction(engine) as conn:
        reruns.lock(conn, project_id, key)
        previous = _previous(conn, project_id, key, request_digest)
        if previous is not None:
            return previous
        original = reruns.original(conn, project_id, run_id)
        if original is None:
            raise errors.NotFound("no such run in this project")
        if original.status not in states.TERMINAL_STATUSES:
            raise errors.RerunRefused(
                f"run {run_id} is {original.status}: only a finished run "
                f"({', '.join(states.TERMINAL_STATUSES)}) can be rerun"
            )
        item = _new(original.run_id, original.workflow_name, original.workflow_version, 0.0)
        _check_quota(conn, project_id, 1, max_active_runs)
        made = reruns.insert(
            conn, project_id, key, request_digest, actor, reason[:MAX_REASON], [item]
        )
    _log(project_id, key, actor, made)
    return Reruns(made, created=True)


def matching(
    engine: Engine,
    project_id: str,
    filters: queries.RunFilters,
    *,
    after: queries.RunPosition | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Matching:
    """The finished runs ``filters`` match (the runs list's filters, restricted to the
    finished statuses), newest first, at most ``limit`` — what a bulk rerun would rerun
    (a dry run answers this and writes nothing)."""
    with engine.connect() as conn:
        return _matching(conn, project_id, filters, after, limit)


def _matching(
    conn: Connection,
    project_id: str,
    filters: queries.RunFilters,
    after: queries.RunPosition | None,
    limit: int,
) -> Matching:
    asked = filters.statuses or states.TERMINAL_STATUSES
    finished = tuple(s for s in asked if s in states.TERMINAL_STATUSES)
    if not finished:
        return Matching([], False, None)
    chosen = replace(filters, statuses=finished)
    rows = queries.list_runs(conn, project_id, chosen, after, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if more else None
    position = queries.RunPosition(last["created_at"], last["run_id"]) if last else None
    return Matching(rows, more, position)


def rerun_matching(
    engine: Engine,
    project_id: str,
    filters: queries.RunFilters,
    *,
    key: str,
    request_digest: str,
    actor: str,
    rate: float,
    after: queries.RunPosition | None = None,
    limit: int = DEFAULT_LIMIT,
    reason: str = "",
    max_active_runs: int | None = None,
) -> tuple[Reruns, Matching]:
    """Rerun every finished run ``filters`` match (at most ``limit``, newest first), the
    new runs becoming claimable ``rate`` per second (see the module's docstring). All or
    nothing: a version no longer registered (422) or the active-run quota (429) refuses the
    whole request. A duplicate answers the runs the key made and matches nothing again.
    The caller bounds ``rate`` (the configured maximum)."""
    if not rate >= MIN_RATE:
        raise errors.MalformedRequest(f"rate must be at least {MIN_RATE:g}")
    if not 0 < limit <= MAX_LIMIT:
        raise errors.MalformedRequest(f"limit must be from 1 to {MAX_LIMIT}")
    with db.transaction(engine) as conn:
        reruns.lock(conn, project_id, key)
        previous = _previous(conn, project_id, key, request_digest)
        if previous is not None:
            return previous, Matching([], False, None)
        found = _matching(conn, project_id, filters, after, limit)
        items = [
            _new(row["run_id"], row["workflow_name"], row["workflow_version"], n / rate)
            for n, row in enumerate(found.originals)
        ]
        _check_quota(conn, project_id, len(items), max_active_runs)
        made = reruns.insert(
            conn, project_id, key, request_digest, actor, reason[:MAX_REASON], items
        )
    _log(project_id, key, actor, made)
    return Reruns(made, created=True), found


def _log(project_id: str, key: str, actor: str, made: list[reruns.Rerun]) -> None:
    if made:
        log.info(
            "runs rerun",
            extra={
                "action": "runs_rerun",
                "project_id": project_id,
                "count": len(made),
                "idempotency_key": key,
                "actor": actor,
                "first_run_id": str(made[0].run_id),
            },
        )
