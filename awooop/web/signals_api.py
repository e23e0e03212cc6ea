"""``POST /v1/projects/{project_id}/runs/{run_id}/signals/{name}``: a signal into a run.

The ``Idempotency-Key`` header is the signal's id: a signal sent again is kept once. The body
(a JSON object, ``{}`` for none) is its payload. A run waiting for the signal is claimable at
once (202 ``delivered``); otherwise the signal is kept for the step that will wait for it
(202 ``kept``). A finished run takes no signal (409 ``E-SIGNAL-001``).
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from awooop import errors, metrics
from awooop.channels import api as api_channel
from awooop.channels.base import digest, json_object
from awooop.domain.workflow import check_signal_name
from awooop.store import signals
from awooop.web import context, request_body, roles
from awooop.web.runs_api import run_id_or_404

blueprint = Blueprint("signals", __name__)


@blueprint.post("/v1/projects/<project_id>/runs/<run_id>/signals/<name>")
def send_signal(project_id: str, run_id: str, name: str) -> tuple[Response, int]:
    roles.authenticate(project_id, roles.ADMIT)
    body = request_body.read()
    if request.mimetype != "application/json":
        raise errors.UnsupportedMediaType()
    try:
        check_signal_name(name)
    except ValueError as bad:
        raise errors.MalformedRequest(str(bad)) from None
    signal_id = api_channel.idempotency_key(context.raw_request(body))
    payload = json_object(body)
    parsed_id = run_id_or_404(run_id)
    with context.engine().connect() as conn:
        delivery = signals.deliver(
            conn, project_id, parsed_id, name, signal_id, payload, digest(payload)
        )
    metrics.SIGNALS.labels(delivery.outcome).inc()
    if delivery.outcome == "no_run":
        raise errors.NotFound("no such run in this project")
    if delivery.outcome == "finished":
        raise errors.RunFinished(f"the run is {delivery.run_status}: it takes no more signals")
    if delivery.outcome == "full":
        raise errors.TooManySignals(f"a run keeps at most {signals.MAX_SIGNALS_PER_RUN} signals")
    if delivery.outcome == "conflict":
        raise errors.IdempotencyKeyReused(
            "this signal id was already used with another signal name or payload"
        )
    answer = {"run_id": str(parsed_id), "signal": name, "signal_id": signal_id}
    if delivery.outcome == "duplicate":
        return jsonify({**answer, "status": "duplicate", "code": errors.DUPLICATE_EVENT_CODE}), 200
    if delivery.outcome == "delivered":
        context.enqueue([parsed_id])
    return jsonify({**answer, "status": delivery.outcome}), 202
