"""The OpenAPI 3.0.3 document of the HTTP API, served at ``GET /openapi.json``: its paths
and operations (the bodies' schemas are in :mod:`awooop.web.openapi_schemas`).

Hand-written and reviewed like code: each operation says what its view does. It is built
from the same constants the views check (the error catalogue, run statuses, channel names,
length limits), so a code or a limit cannot drift between the two. A new route or error
needs an entry here: ``tests/unit/test_openapi.py`` checks the document is valid, matches
the Flask app's routes both ways and documents every error code, and
``tests/e2e/test_openapi_processes.py`` runs schemathesis against a real gunicorn.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from awooop import errors
from awooop.channels import api as api_channel
from awooop.channels.base import MAX_EVENT_ID_LENGTH, MAX_JSON_DEPTH
from awooop.domain import states, tags
from awooop.models.project import CHANNEL_TYPES, PROJECT_ID_PATTERN, RUN_CHANNEL_TYPES
from awooop.store import queries
from awooop.web import openapi_schemas, params
from awooop.web.management_api import OPERATIONS
from awooop.web.openapi_schemas import Schema

_JSON = "application/json"
WEBHOOK_CHANNELS = tuple(c for c in CHANNEL_TYPES if c != "api")
_ref = openapi_schemas.ref


def _json(schema: Schema) -> dict[str, Any]:
    return {_JSON: {"schema": schema}}


def _ok(description: str, schema: Schema, **headers: Schema) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": _json(schema)}
    if headers:
        response["headers"] = headers
    return response


_RETRY_AFTER = {
    "description": "Seconds to wait before trying again.",
    "required": True,
    "schema": {"type": "integer", "minimum": 1},
}
_ETAG = {
    "description": 'The run\'s `version` as a strong ETag, e.g. `"7"`: send it back as '
    "`If-Match` with a management operation.",
    "required": True,
    "schema": {"type": "string", "pattern": '^"[0-9]+"$'},
}


def _errors(*classes: type[errors.AwoooPError]) -> dict[str, Any]:
    """Responses for these catalogue errors, one per HTTP status; the schema of each lists
    exactly the codes that status can carry here."""
    by_status: dict[int, list[type[errors.AwoooPError]]] = defaultdict(list)
    for cls in dict.fromkeys(classes):
        by_status[cls.http_status].append(cls)
    responses: dict[str, Any] = {}
    for status, group in sorted(by_status.items()):
        codes = [cls.code for cls in group]
        schema: Schema = {
            "allOf": [
                _ref("Error"),
                {"properties": {"error": {"properties": {"code": {"enum": codes}}}}},
            ]
        }
        response: dict[str, Any] = {
            "description": " ".join(
                f"`{cls.code}`: {(cls.__doc__ or '').strip()}" for cls in group
            ),
            "content": {
                _JSON: {
                    "schema": schema,
                    "examples": {
                        cls.code: {
                            "value": {
                                "error": {"code": cls.code, "message": (cls.__doc__ or "").strip()}
                            }
                        }
                        for cls in group
                    },
                }
            },
        }
        if status in (429, 503):
            response["headers"] = {"Retry-After": _RETRY_AFTER}
        responses[str(status)] = response
    return responses


# Parameters ---------------------------------------------------------------------------------

_PROJECT_ID = {
    "name": "project_id",
    "in": "path",
    "required": True,
    "description": "The project. An unknown project answers 401 like bad credentials.",
    "schema": {"type": "string", "pattern": PROJECT_ID_PATTERN},
}
_RUN_ID = {
    "name": "run_id",
    "in": "path",
    "required": True,
    "description": "The run (another project's run is a 404).",
    "schema": {"type": "string", "format": "uuid"},
}
_LIMIT = {
    "name": "limit",
    "in": "query",
    "description": "Page size.",
    "schema": {
        "type": "integer",
        "minimum": 1,
        "maximum": params.MAX_LIMIT,
        "default": params.DEFAULT_LIMIT,
    },
}


def _cursor(kind: str) -> Schema:
    return {
        "name": "cursor",
        "in": "query",
        "description": f"`next_cursor` of the previous page of this {kind} list (same filters).",
        "schema": {
            "type": "string",
            "pattern": "^[A-Za-z0-9_-]+$",
            "maxLength": params.MAX_CURSOR_LENGTH,
        },
    }


def _csv(name: str, values: tuple[str, ...], what: str) -> Schema:
    return {
        "name": name,
        "in": "query",
        "description": f"Only runs with one of these {what} (comma-separated).",
        "style": "form",
        "explode": False,
        "schema": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "enum": list(values)},
        },
    }


def _time(name: str, what: str, event: str = "created") -> Schema:
    return {
        "name": name,
        "in": "query",
        "description": f"Runs {event} {what} (ISO 8601 with a UTC offset).",
        "schema": {"type": "string", "format": "date-time"},
    }


_TRACEPARENT = {
    "name": "traceparent",
    "in": "header",
    "description": "W3C trace context, stored on the run and carried into its log lines. "
    "An invalid value is ignored, never refused.",
    "schema": {"type": "string"},
}


# Operations ---------------------------------------------------------------------------------

_ADMISSION_ERRORS = (
    errors.MalformedRequest,
    errors.Unauthenticated,
    errors.PayloadTooLarge,
    errors.UnsupportedMediaType,
    errors.IdempotencyKeyReused,
    errors.ActiveRunQuotaExceeded,
    errors.RateLimited,
    errors.ServiceUnavailable,
)
_READ_ERRORS = (errors.Unauthenticated, errors.Forbidden, errors.ServiceUnavailable)
_ADMISSION_DESCRIPTION = (
    "Admits the event: a new run (202), the run an earlier delivery made (200, "
    f"`{errors.DUPLICATE_EVENT_CODE}`), or 200 `ignored` when no workflow is routed for the "
    "channel. The body is limited to `AWOOOP_MAX_BODY_BYTES` (1 MiB), checked before parsing "
    "and whatever the framing (a chunked body over it is a 413, never cut); JSON nested "
    f"deeper than {MAX_JSON_DEPTH} levels is a 400 `{errors.MalformedRequest.code}`; "
    "bad credentials and an unknown project answer the same 401."
)
_DEPTH_NOTE = (
    f"A JSON object nested at most {MAX_JSON_DEPTH} levels deep (objects and arrays, the body "
    f"itself included); deeper is a 400 `{errors.MalformedRequest.code}`."
)


def _body(schema: Schema, description: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"required": True, "content": _json(schema)}
    body["description"] = f"{description} {_DEPTH_NOTE}" if description else _DEPTH_NOTE
    return body


def _webhook(channel: str) -> dict[str, Any]:
    security: list[dict[str, list[str]]]
    parameters: list[Schema] = [_PROJECT_ID, _TRACEPARENT]
    body = _body({"type": "object"}, "The provider's payload, unchanged.")
    answers: Schema = {"oneOf": [_ref("Admitted"), _ref("Ignored"), _ref("Decision")]}
    if channel == "telegram":
        security = [{"telegramSecretToken": []}]
        parameters.append(
            {
                "name": "bot_id",
                "in": "query",
                "description": "The bot's numeric id (the prefix of its token); part of the "
                "event key, `0` when left out; given more than once, a 400.",
                "schema": {"type": "string", "pattern": "^[0-9]{1,20}$"},
            }
        )
        body = _body(_ref("TelegramUpdate"))
        key = "`<bot_id>:<update_id>`"
    elif channel == "alertmanager":
        security = [{"alertmanagerBearer": []}, {"alertmanagerBasic": []}]
        body = _body(_ref("AlertmanagerNotification"))
        answers = {"oneOf": [_ref("Admitted"), _ref("Ignored")]}
        key = "SHA-256 of receiver, groupKey, status and each alert's (fingerprint, status, "
        key += "startsAt, endsAt): a retry is a duplicate, the resolved notification a new run"
    elif channel == "gitea":
        security = [{"giteaSignature": []}]
        parameters += [
            {
                "name": "X-Gitea-Delivery",
                "in": "header",
                "required": True,
                "description": "The delivery id: the event key.",
                "schema": {"type": "string", "minLength": 1, "maxLength": MAX_EVENT_ID_LENGTH},
            },
            {
                "name": "X-Gitea-Event",
                "in": "header",
                "description": "The event type, kept with the run's input.",
                "schema": {"type": "string"},
            },
        ]
        answers = {"oneOf": [_ref("Admitted"), _ref("Ignored")]}
        key = "the `X-Gitea-Delivery` header"
    else:
        security = [{"lineSignature": []}]
        body = _body(_ref("LineWebhook"))
        answers = {"oneOf": [_ref("LineAdmitted"), _ref("Ignored")]}
        key = "each event's `webhookEventId`; one run per event"
    return {
        "post": {
            "operationId": f"webhook_{channel}",
            "tags": ["admission"],
            "summary": f"Receive a {channel} webhook",
            "description": f"{_ADMISSION_DESCRIPTION} Event key: {key}.",
            "security": security,
            "parameters": parameters,
            "requestBody": body,
            "responses": {
                "202": _ok("A new run (LINE: at least one).", answers),
                "200": _ok("A duplicate, ignored, or an approval decision.", answers),
                **_errors(*_ADMISSION_ERRORS),
            },
        }
    }


def _idempotency_key(description: str) -> dict[str, Any]:
    return {
        "name": "Idempotency-Key",
        "in": "header",
        "required": True,
        "description": description,
        "schema": {
            "type": "string",
            "minLength": 1,
            "maxLength": api_channel.MAX_KEY_LENGTH,
            "pattern": f"^{api_channel.KEY_PATTERN}$",
        },
    }


def _create_run() -> dict[str, Any]:
    return {
        "post": {
            "operationId": "create_run",
            "tags": ["admission"],
            "summary": "Start a run: a named workflow, or the API channel's from an event",
            "description": f"{_ADMISSION_DESCRIPTION} Event key: the `Idempotency-Key` header. "
            "Roles ingest, operator, admin.",
            "parameters": [
                _PROJECT_ID,
                _idempotency_key("The event key: the same key again returns the same run."),
                _TRACEPARENT,
            ],
            "requestBody": _body(
                {
                    "oneOf": [
                        _ref("StartWorkflow"),
                        {"type": "object", "not": {"required": ["workflow"]}},
                    ]
                },
                "A start request (a `workflow` key: the named workflow, with `input` as the "
                "event), or any other JSON object: the event, for the workflow routed for "
                "`api`. The request digest covers the whole body.",
            ),
            "responses": {
                "202": _ok("A new run.", _ref("Admitted")),
                "200": _ok(
                    "A duplicate, or ignored (no workflow routed).",
                    {"oneOf": [_ref("Admitted"), _ref("Ignored")]},
                ),
                **_errors(
                    *_ADMISSION_ERRORS,
                    errors.MissingIdempotencyKey,
                    errors.Forbidden,
                    errors.WorkflowNotAllowed,
                    errors.WorkflowVersionUnknown,
                ),
            },
        }
    }


_FIND_PARAMETERS: list[Schema] = [
    {
        "name": "provider_event_id",
        "in": "query",
        "description": "Only the runs this event started (any channel), and their reruns.",
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_EVENT_ID_LENGTH},
    },
    {
        "name": "idempotency_key",
        "in": "query",
        "description": "Only the runs started with this Idempotency-Key: an API start "
        "request's, or a rerun request's.",
        "schema": {"type": "string", "minLength": 1, "maxLength": api_channel.MAX_KEY_LENGTH},
    },
    {
        "name": "tag",
        "in": "query",
        "description": "Only runs with this tag, `KEY:VALUE` (repeat for several: all must "
        "match). Tags are set by steps (`ctx.tag`).",
        "style": "form",
        "explode": True,
        "schema": {
            "type": "array",
            "maxItems": tags.MAX_TAGS,
            "items": {
                "type": "string",
                "pattern": f"^[A-Za-z_][A-Za-z0-9_.-]{{0,{tags.MAX_KEY_LENGTH - 1}}}:",
                "maxLength": tags.MAX_KEY_LENGTH + 1 + tags.MAX_VALUE_LENGTH,
            },
        },
    },
]


def _rerun_one() -> dict[str, Any]:
    return {
        "post": {
            "operationId": "rerun_run",
            "tags": ["management"],
            "summary": "Rerun a finished run: a new run with its input",
            "description": "A new run of the same workflow and version with the original's "
            "input, linked both ways (`rerun_of`, the original's `reruns`). Not a new "
            "admission of the provider's event: its dedupe row is untouched. The "
            "`Idempotency-Key` makes it idempotent. Only a finished run (COMPLETED, FAILED, "
            f"CANCELLED); otherwise 409 `{errors.RerunRefused.code}`. Roles operator, admin.",
            "parameters": [
                _PROJECT_ID,
                _RUN_ID,
                _idempotency_key("The rerun's key: the same key again answers the same run."),
            ],
            "requestBody": {**_body(_ref("RerunRequest")), "required": False},
            "responses": {
                "202": _ok("A new run.", _ref("Rerun")),
                "200": _ok("A duplicate: the run this key made.", _ref("Rerun")),
                **_errors(*_RERUN_ERRORS),
            },
        }
    }


_RERUN_ERRORS = (
    errors.MalformedRequest,
    errors.MissingIdempotencyKey,
    errors.Unauthenticated,
    errors.Forbidden,
    errors.NotFound,
    errors.RerunRefused,
    errors.PayloadTooLarge,
    errors.UnsupportedMediaType,
    errors.IdempotencyKeyReused,
    errors.WorkflowVersionUnknown,
    errors.ActiveRunQuotaExceeded,
    errors.RateLimited,
    errors.ServiceUnavailable,
)


def _rerun_many() -> dict[str, Any]:
    return {
        "post": {
            "operationId": "rerun_runs",
            "tags": ["management"],
            "summary": "Rerun every finished run the runs list's filters match",
            "description": "At most `limit` runs (newest first), the new runs becoming "
            "claimable at most `rate` per second (their `available_at` one `1/rate` apart). "
            "`dry_run`: how many would be rerun (and which), nothing written, no key needed. "
            "All or nothing. Otherwise as a single rerun. Role admin.",
            "parameters": [
                _PROJECT_ID,
                {
                    **_idempotency_key("Required unless `dry_run`."),
                    "required": False,
                },
            ],
            "requestBody": _body(_ref("BulkRerun")),
            "responses": {
                "202": _ok("New runs.", _ref("BulkRerunResult")),
                "200": _ok("A dry run, a duplicate, or no run matched.", _ref("BulkRerunResult")),
                **_errors(*(e for e in _RERUN_ERRORS if e is not errors.RerunRefused)),
            },
        }
    }


def _list_runs() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "list_runs",
            "tags": ["runs"],
            "summary": "List runs, newest first",
            "description": "Keyset pages: runs arriving meanwhile cause no duplicates or gaps. "
            "An unknown parameter or a bad value is a 400. Role viewer or above.",
            "parameters": [
                _PROJECT_ID,
                _csv("status", states.RUN_STATUSES, "statuses"),
                _csv("saga_status", states.SAGA_STATUSES, "saga statuses"),
                {
                    "name": "workflow",
                    "in": "query",
                    "description": "Only runs of this workflow.",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 128},
                },
                {
                    "name": "channel",
                    "in": "query",
                    "description": "Only runs from this channel.",
                    "schema": {"type": "string", "enum": list(RUN_CHANNEL_TYPES)},
                },
                _time("created_from", "at or after this instant"),
                _time("created_until", "before this instant"),
                _time("finished_from", "at or after this instant", "finished"),
                _time("finished_until", "before this instant", "finished"),
                {
                    "name": "failure_code",
                    "in": "query",
                    "description": "Only runs that failed with this code (e.g. E-STEP-001).",
                    "schema": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": queries.MAX_FAILURE_CODE,
                    },
                },
                {
                    "name": "outbox",
                    "in": "query",
                    "description": "Only runs with an outbox message in this status: "
                    "PENDING (waiting to be sent) or PARKED (given up).",
                    "schema": {"type": "string", "enum": list(queries.OUTBOX_FILTER_STATUSES)},
                },
                *_FIND_PARAMETERS,
                _LIMIT,
                _cursor("runs"),
            ],
            "responses": {
                "200": _ok("A page of runs.", _ref("RunPage")),
                **_errors(errors.MalformedRequest, *_READ_ERRORS),
            },
        }
    }


def _get_run() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "get_run",
            "tags": ["runs"],
            "summary": "A run with its step journal",
            "description": "Both status axes, input, output, failure, lease and `saga_steps`. "
            "Role viewer or above.",
            "parameters": [_PROJECT_ID, _RUN_ID],
            "responses": {
                "200": _ok("The run.", _ref("Run"), ETag=_ETAG),
                **_errors(errors.NotFound, *_READ_ERRORS),
            },
        }
    }


def _run_events() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "list_run_events",
            "tags": ["runs"],
            "summary": "A run's audit trail, in sequence order",
            "description": "Transitions, leases, steps and operations (`awooop_run_event`). "
            "Role viewer or above.",
            "parameters": [_PROJECT_ID, _RUN_ID, _LIMIT, _cursor("events")],
            "responses": {
                "200": _ok("A page of events.", _ref("RunEventPage")),
                **_errors(errors.MalformedRequest, errors.NotFound, *_READ_ERRORS),
            },
        }
    }


def _interventions() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "list_interventions",
            "tags": ["runs"],
            "summary": "Runs waiting for a person (MANUAL_INTERVENTION), oldest first",
            "description": "`direction` FORWARD → retry-resolution, BACKWARD → "
            "retry-compensation. Role viewer or above.",
            "parameters": [_PROJECT_ID, _LIMIT, _cursor("interventions")],
            "responses": {
                "200": _ok("A page of runs.", _ref("RunPage")),
                **_errors(errors.MalformedRequest, *_READ_ERRORS),
            },
        }
    }


def _project_listing(
    operation_id: str, tag: str, summary: str, description: str, answer: str, schema: str
) -> dict[str, Any]:
    """A project's read-only list with no parameters of its own (role viewer or above)."""
    return {
        "get": {
            "operationId": operation_id,
            "tags": [tag],
            "summary": summary,
            "description": f"{description} Role viewer or above.",
            "parameters": [_PROJECT_ID],
            "responses": {
                "200": _ok(answer, _ref(schema)),
                **_errors(errors.MalformedRequest, *_READ_ERRORS),
            },
        }
    }


def _workflows() -> dict[str, Any]:
    return _project_listing(
        "list_workflows",
        "runs",
        "Workflow versions and the project's open runs on each",
        "Every (name, version) this web process has registered or an unfinished run of the "
        "project uses: its open runs, whether this process has it (and with which digest), "
        "and whether it is the version new events start. Retire a version once its "
        "`open_runs` is 0.",
        "The versions, by name then version.",
        "WorkflowVersions",
    )


def _workers() -> dict[str, Any]:
    return _project_listing(
        "list_workers",
        "operations",
        "The worker processes, with the project's runs each holds",
        "Workers serve every project: every process that has held a lease (until pruned) is "
        "listed, and `runs_held` counts this project's RUNNING runs only.",
        "The workers, by host then start.",
        "Workers",
    )


def _tool_results() -> dict[str, Any]:
    return {
        "post": {
            "operationId": "deliver_tool_result",
            "tags": ["runs"],
            "summary": "Deliver an asynchronous tool call's result",
            "description": "Deduplicated by `event_id`. A result the run no longer waits for "
            "is answered `late` (a late success may start a compensation run); a `step` the "
            "run's workflow version does not have is a 422 and uses up nothing. Roles ingest, "
            "operator, admin.",
            "parameters": [_PROJECT_ID, _RUN_ID],
            "requestBody": _body(_ref("ToolResult")),
            "responses": {
                "202": _ok("Accepted: the run continues.", _ref("ToolResultAnswer")),
                "200": _ok("A duplicate, or late.", _ref("ToolResultAnswer")),
                **_errors(
                    errors.MalformedRequest,
                    errors.Unauthenticated,
                    errors.Forbidden,
                    errors.NotFound,
                    errors.PayloadTooLarge,
                    errors.UnsupportedMediaType,
                    errors.IdempotencyKeyReused,
                    errors.UnknownToolStep,
                    errors.ServiceUnavailable,
                ),
            },
        }
    }


def _signal() -> dict[str, Any]:
    return {
        "post": {
            "operationId": "send_signal",
            "tags": ["runs"],
            "summary": "Send a signal to a run",
            "description": "Kept once per signal id (the `Idempotency-Key` header) for the step "
            "that waits for a signal of this name; a run waiting for it now is woken "
            "(`delivered`), otherwise the signal is `kept` for the wait to come. The body is "
            "the signal's payload. Roles ingest, operator, admin.",
            "parameters": [
                _PROJECT_ID,
                _RUN_ID,
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
                },
                _idempotency_key("The signal's id: the same id again is a duplicate."),
            ],
            "requestBody": _body({"type": "object"}, "The signal's payload: any JSON object."),
            "responses": {
                "202": _ok("Delivered to the waiting run, or kept for it.", _ref("SignalAnswer")),
                "200": _ok("A duplicate.", _ref("SignalAnswer")),
                **_errors(
                    errors.MalformedRequest,
                    errors.MissingIdempotencyKey,
                    errors.Unauthenticated,
                    errors.Forbidden,
                    errors.NotFound,
                    errors.PayloadTooLarge,
                    errors.UnsupportedMediaType,
                    errors.IdempotencyKeyReused,
                    errors.RunFinished,
                    errors.TooManySignals,
                    errors.ServiceUnavailable,
                ),
            },
        }
    }


def _management(segment: str, operation: str) -> dict[str, Any]:
    manual_close = operation == "manual_close"
    extra = (errors.ManualCloseDisabled,) if manual_close else ()
    role = "Role admin; only with `AWOOOP_MANUAL_CLOSE_ENABLED=1`." if manual_close else ""
    return {
        "post": {
            "operationId": operation,
            "tags": ["management"],
            "summary": f"{segment.replace('-', ' ').capitalize()} a run",
            "description": "Idempotent by `operation_id`; audited with the caller's token and "
            f"the reason. {role or 'Roles operator, admin.'}",
            "parameters": [
                _PROJECT_ID,
                _RUN_ID,
                {
                    "name": "If-Match",
                    "in": "header",
                    "description": 'The run\'s version as its ETag (`"7"`): refused with 412 '
                    'if the run changed. A weak one (`W/"7"`) never matches: 412.',
                    "schema": {"type": "string", "pattern": '^(W/)?"?[0-9]{1,18}"?$|^\\*$'},
                },
            ],
            "requestBody": _body(_ref("Operation")),
            "responses": {
                "200": _ok("Done, or replayed.", _ref("OperationResult"), ETag=_ETAG),
                **_errors(
                    errors.MalformedRequest,
                    errors.InvalidOperation,
                    errors.Unauthenticated,
                    errors.Forbidden,
                    errors.NotFound,
                    errors.OperationRefused,
                    *extra,
                    errors.VersionMismatch,
                    errors.PayloadTooLarge,
                    errors.UnsupportedMediaType,
                    errors.OperationIdReused,
                    errors.RateLimited,
                    errors.ServiceUnavailable,
                ),
            },
        }
    }


def _approval() -> dict[str, Any]:
    return {
        "post": {
            "operationId": "decide_approval",
            "tags": ["approvals"],
            "summary": "Approve or reject a waiting approval step",
            "description": "The token comes from the approval prompt; which roles may decide "
            "is the step's to say (operator and admin by default). Exactly one of any number "
            "of concurrent calls decides.",
            "parameters": [
                _PROJECT_ID,
                {
                    "name": "token",
                    "in": "path",
                    "required": True,
                    "description": "The approval token (43 characters, base64url).",
                    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{43}$"},
                },
            ],
            "requestBody": _body(_ref("ApprovalDecision")),
            "responses": {
                "200": _ok("Decided.", _ref("ApprovalDecided")),
                **_errors(
                    errors.MalformedRequest,
                    errors.Unauthenticated,
                    errors.ApprovalForbidden,
                    errors.NotFound,
                    errors.ApprovalClosed,
                    errors.ApprovalExpired,
                    errors.PayloadTooLarge,
                    errors.UnsupportedMediaType,
                    errors.ServiceUnavailable,
                ),
            },
        }
    }


def _unauthenticated(operation_id: str, summary: str, responses: dict[str, Any]) -> Schema:
    return {
        "get": {
            "operationId": operation_id,
            "tags": ["operations"],
            "summary": summary,
            "security": [],
            "responses": responses,
        }
    }


def _paths() -> dict[str, Any]:
    project = "/v1/projects/{project_id}"
    run = f"{project}/runs/{{run_id}}"
    paths: dict[str, Any] = {
        f"{project}/webhooks/{channel}": _webhook(channel) for channel in WEBHOOK_CHANNELS
    }
    paths[f"{project}/runs"] = {**_list_runs(), **_create_run()}
    paths[run] = _get_run()
    paths[f"{run}/events"] = _run_events()
    paths[f"{run}/tool-results"] = _tool_results()
    paths[f"{run}/signals/{{name}}"] = _signal()
    for segment, operation in OPERATIONS.items():
        paths[f"{run}/{segment}"] = _management(segment, operation)
    paths[f"{run}/rerun"] = _rerun_one()
    paths[f"{project}/runs/rerun"] = _rerun_many()
    paths[f"{project}/interventions"] = _interventions()
    paths[f"{project}/workflows"] = _workflows()
    paths[f"{project}/workers"] = _workers()
    paths[f"{project}/approvals/{{token}}"] = _approval()
    paths["/healthz"] = _unauthenticated(
        "healthz",
        "Liveness: the process serves requests",
        {"200": _ok("Up.", {"type": "object", "properties": {"status": {"enum": ["ok"]}}})},
    )
    unready = _errors(errors.ServiceUnavailable)["503"]
    unready["description"] = "Not ready: the database or the broker is unreachable."
    unready["content"][_JSON]["schema"] = {
        "allOf": [
            _ref("Error"),
            {"required": ["checks"], "properties": {"checks": _ref("ReadinessChecks")}},
        ]
    }
    paths["/readyz"] = _unauthenticated(
        "readyz",
        "Readiness: the database and the broker answer",
        {
            "200": _ok(
                "Ready.",
                {
                    "type": "object",
                    "required": ["status", "checks"],
                    "properties": {
                        "status": {"type": "string", "enum": ["ready"]},
                        "checks": _ref("ReadinessChecks"),
                    },
                },
            ),
            "503": unready,
        },
    )
    paths["/metrics"] = _unauthenticated(
        "metrics",
        "Prometheus metrics: the web processes' counters, the gauges read from the database, "
        "and the counters of workers and beat sharing this host's metrics directory",
        {
            "200": {
                "description": "Prometheus text exposition format.",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        },
    )
    paths["/openapi.json"] = _unauthenticated(
        "openapi",
        "This document",
        {
            "200": _ok(
                "The OpenAPI document; cacheable (`ETag`, `Cache-Control`).",
                {"type": "object"},
                ETag={"schema": {"type": "string"}},
            ),
            "304": {"description": "Not modified (`If-None-Match` matched the ETag)."},
        },
    )
    return paths


def build() -> dict[str, Any]:
    """The whole OpenAPI document, as plain JSON-serialisable data."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "AwoooP",
            "version": "1",
            "description": "Events from chat, alerting and code hosting providers become "
            "durable runs; operators read and steer them. Every error is "
            '`{"error": {"code": "E-…", "message": "…"}}`; the codes are stable. A project '
            "API token sees its own project only: another project's run is a 404. The HTTP "
            "server itself refuses a request line over 4094 bytes with a plain 400.",
        },
        "tags": [
            {"name": "admission", "description": "Events in: one run per event, exactly once."},
            {"name": "runs", "description": "Reading runs; delivering tool results."},
            {"name": "management", "description": "Steering runs (operator role)."},
            {"name": "approvals", "description": "Deciding approval steps."},
            {"name": "operations", "description": "Health, readiness, metrics, this document."},
        ],
        "security": [{"apiToken": []}],
        "paths": _paths(),
        "components": {
            "schemas": openapi_schemas.SCHEMAS,
            "securitySchemes": openapi_schemas.SECURITY_SCHEMES,
        },
    }
