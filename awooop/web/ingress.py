"""Admission: ``POST /v1/projects/{project_id}/webhooks/{channel}`` and ``.../runs``.

One request: size and content type → credentials (401 alike for an unknown project; 403 for
an API token whose role may not admit) → the project's ingress rate limit (429
``E-RATE-001``) → parse → route → one transaction (dedupe row + run row per event, refused
with 429 ``E-QUOTA-001`` when the project's active-run quota is reached) → commit → send one
Celery message per new run → respond. Nothing slow happens inline.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, Response, jsonify, request

from awooop import db, errors, metrics, telemetry, tracing
from awooop.channels import CHANNELS
from awooop.channels import api as api_channel
from awooop.channels.base import ChannelSecrets, InboundEvent
from awooop.channels.base import run_input as _run_input
from awooop.domain.workflow import Correlation, Workflow
from awooop.engine import chat_decisions
from awooop.store import admission, projects
from awooop.web import context, request_body, roles, throttle
from awooop.workflows import registry

log = logging.getLogger("awooop.web.ingress")

blueprint = Blueprint("ingress", __name__)


@blueprint.post("/v1/projects/<project_id>/webhooks/<channel>")
def webhook(project_id: str, channel: str) -> tuple[Response, int]:
    if channel not in CHANNELS or channel == "api":
        raise errors.NotFound(f"no webhook channel {channel!r}")
    return _admit(project_id, channel)


@blueprint.post("/v1/projects/<project_id>/runs")
def create_run(project_id: str) -> tuple[Response, int]:
    return _admit(project_id, "api")


def _read_json_body() -> bytes:
    body = request_body.read()  # 413 first, for any content type
    if request.mimetype != "application/json":
        raise errors.UnsupportedMediaType()
    return body


def _secrets_for(auth: projects.ProjectAuth, channel: str) -> ChannelSecrets:
    if channel == "api":
        return ChannelSecrets(
            hashes=tuple(
                c.secret_hash for c in auth.api_tokens() if c.role in roles.ADMIT and c.secret_hash
            )
        )
    rows = auth.channel_secrets(channel)
    box = context.secret_box()

    def keys() -> list[str]:
        opened = []
        for row in rows:
            if not row.secret_encrypted:
                continue
            key = box.decrypt(row.secret_encrypted)
            if key is None:
                # Encrypted under a key AWOOOP_SECRET_KEY no longer lists (dropped before
                # `awooop secrets reencrypt`): this credential cannot verify anything.
                log.warning(
                    "a channel secret decrypts with none of the configured keys",
                    extra={
                        "action": "secret_undecryptable",
                        "project_id": auth.project_id,
                        "channel": channel,
                        "credential_id": row.credential_id,
                    },
                )
                continue
            opened.append(key)
        return opened

    return ChannelSecrets(
        hashes=tuple(c.secret_hash for c in rows if c.secret_hash), hmac_keys=keys
    )


def _admit(project_id: str, channel: str) -> tuple[Response, int]:
    header = request.headers.get("traceparent")
    attributes = {"project_id": project_id, "channel": channel}
    with telemetry.admission(channel, header, attributes) as span:
        try:
            response, status = _admit_traced(project_id, channel, span)
        except errors.AwoooPError as error:
            span.set(error_code=error.code)
            if error.http_status >= 500:
                span.fail(error.code)
            raise
        except Exception as error:  # answered 500 by the error handlers
            span.fail(type(error).__name__)
            raise
        return response, status


def _admit_traced(project_id: str, channel: str, span: telemetry.Span) -> tuple[Response, int]:
    module = CHANNELS[channel]
    raw = context.raw_request(_read_json_body())
    auth = context.project_auth(project_id, channel)
    # An unknown project answers exactly like bad credentials: no enumeration.
    if auth is None or not module.authenticate(raw, _secrets_for(auth, channel)):
        if channel == "api" and roles.matching_token(api_channel.bearer_token(raw), auth):
            metrics.ADMISSIONS.labels(channel, "forbidden").inc()
            raise errors.Forbidden("a viewer API token cannot admit events")
        metrics.ADMISSIONS.labels(channel, "unauthenticated").inc()
        raise errors.Unauthenticated()
    try:
        throttle.check(project_id, throttle.INGRESS, auth.limits.ingress_per_minute)
    except errors.RateLimited:
        metrics.ADMISSIONS.labels(channel, "rate_limited").inc()
        raise
    events = module.parse(raw)
    # Approval buttons pressed in the chat decide an approval instead of starting a run.
    presses = [e for e in events if chat_decisions.button_press(channel, e)]
    decided = []
    for press in presses:
        outcome = chat_decisions.decide(context.engine(), project_id, channel, press)
        if outcome.runs:
            context.enqueue(outcome.runs)
        context.notify(outcome.messages)
        decided.append(outcome.answer)
    events = [e for e in events if e not in presses]
    if decided and not events:
        if channel == "line":
            return jsonify({"runs": [], "decisions": decided}), 200
        return jsonify(decided[0]), 200
    if not events:  # LINE's webhook verification request
        return jsonify({"status": "ok", "runs": []}), 200
    try:
        workflow = _workflow_for(auth, channel, events)
    except errors.WorkflowNotAllowed:
        # Read from the kept settings, which may predate an operator allowing it just now:
        # a refusal is answered only from the database's.
        fresh = context.project_auth(project_id, channel, fresh=True)
        if fresh is None:
            raise
        auth = fresh
        workflow = _workflow_for(auth, channel, events)
    if workflow is None:
        metrics.ADMISSIONS.labels(channel, "ignored").inc(len(events))
        reason = f"no workflow is routed for channel {channel}"
        span.set(dedupe="ignored")
        return jsonify({"status": "ignored", "reason": reason}), 200
    span.set(workflow=workflow.name, workflow_version=workflow.version)
    # A missing or malformed traceparent is ignored, never refused. When spans are made, the
    # run keeps the admission span's context (in the caller's trace, or a new one).
    traceparent = span.traceparent or tracing.parse_traceparent(request.headers.get("traceparent"))
    new_runs = [
        admission.NewRun.of(
            workflow,
            project_id,
            _run_input(channel, event, auth.config),
            event.request_digest,
            traceparent,
        )
        for event in events
    ]
    # One event: one statement, atomic by itself. Several (LINE): one transaction, so a
    # refused event rolls back the others.
    # Over the active-run quota, nothing is written (and a multi-event request is refused
    # whole). Runs already admitted keep going: claims never look at quotas.
    quota = auth.limits.max_active_runs
    engine = context.engine()
    correlations = [_correlation(workflow, new.input) for new in new_runs]
    # A correlated event takes several statements: always a transaction.
    several = len(new_runs) > 1 or any(correlations)
    # One statement runs on the request thread's own connection (no checkout per request).
    connection = db.transaction(engine) if several else db.thread_connection(engine).connect()
    try:
        with connection as conn:
            results = [
                admission.admit(conn, new, quota, correlation)
                for new, correlation in zip(new_runs, correlations, strict=True)
            ]
            if not all(r.digest_matches for r in results):
                # A mismatch is always a duplicate (nothing inserted for it); raising here
                # rolls back the other events of a multi-event request.
                metrics.ADMISSIONS.labels(channel, "key_reused").inc()
                raise errors.IdempotencyKeyReused()
    except admission.OverQuota:
        metrics.ADMISSIONS.labels(channel, "over_quota").inc(len(new_runs))
        raise errors.ActiveRunQuotaExceeded(
            context.settings().quota_retry_after_seconds,
            f"this project may have {quota} active runs at a time; retry when some finish",
        ) from None
    _describe_span(span, results)
    created = [r.run_id for r in results if r.created]
    signalled = sum(1 for r in results if r.signalled)
    _count(channel, len(created), len(results) - len(created) - signalled, signalled)
    woken = [r.run_id for r in results if r.woke]
    if created or woken:
        context.enqueue([*created, *woken])
    return _respond(channel, results, decided)


def _describe_span(span: telemetry.Span, results: list[admission.Admission]) -> None:
    """The runs admitted (or found) and what deduplication made of each event: a value for
    one event, a list in event order for several (LINE)."""
    runs = [str(r.run_id) for r in results]
    outcomes = [
        "signalled" if r.signalled else "created" if r.created else "duplicate" for r in results
    ]
    if len(results) == 1:
        span.set(run_id=runs[0], dedupe=outcomes[0])
    else:
        span.set(run_id=runs, dedupe=outcomes)


def _correlation(workflow: Workflow, run_input: dict[str, Any]) -> Correlation | None:
    """The workflow's correlation of this event, if it declares one. A correlation function
    that fails on an event it did not expect is logged, and the event starts a run."""
    if workflow.correlate is None:
        return None
    try:
        return workflow.correlate(run_input)
    except Exception:
        log.exception(
            "correlation failed; the event starts a run",
            extra={"action": "correlation_failed", "workflow": workflow.name},
        )
        return None


def _workflow_for(
    auth: projects.ProjectAuth, channel: str, events: list[InboundEvent]
) -> Workflow | None:
    """The workflow the events start: the one an API start request names, refused unless the
    project allows it (an unknown name answers the same: no enumeration), else the latest
    version of the one routed for the channel (None: nothing routed)."""
    chosen = events[0].meta.get("workflow") if channel == "api" else None
    if chosen is None:
        routed = auth.routes.get(channel)
        return registry.latest(routed) if isinstance(routed, str) else None
    latest = registry.latest(chosen) if auth.allows(chosen) else None
    if latest is None:
        raise errors.WorkflowNotAllowed()
    version = events[0].meta.get("version")
    if version is None:
        return latest
    try:
        return registry.get(chosen, version)
    except registry.UnknownWorkflow:
        raise errors.WorkflowVersionUnknown(
            f"workflow {chosen} has no version {version}; the latest is {latest.version}"
        ) from None


def _count(channel: str, created: int, duplicates: int, signalled: int = 0) -> None:
    if created:
        metrics.ADMISSIONS.labels(channel, "created").inc(created)
    if duplicates:
        metrics.ADMISSIONS.labels(channel, "duplicate").inc(duplicates)
    if signalled:
        metrics.ADMISSIONS.labels(channel, "signalled").inc(signalled)


def _describe(result: admission.Admission) -> dict[str, Any]:
    body: dict[str, Any] = {"run_id": str(result.run_id), "status": result.status}
    if result.signalled:
        body["signal"] = result.signalled  # delivered to this open run
    elif not result.created:
        body["code"] = errors.DUPLICATE_EVENT_CODE
    return body


def _respond(
    channel: str, results: list[admission.Admission], decided: list[dict[str, Any]]
) -> tuple[Response, int]:
    status = 202 if any(r.created or r.signalled for r in results) else 200
    if channel == "line":  # one request, several events (and maybe button presses)
        body: dict[str, Any] = {"runs": [_describe(r) for r in results]}
        if decided:
            body["decisions"] = decided
        return jsonify(body), status
    return jsonify(_describe(results[0])), status
