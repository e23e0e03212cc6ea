"""Component schemas and security schemes of the OpenAPI document
(:mod:`awooop.web.openapi_spec`).

What the API's JSON bodies look like, built from the constants the code checks: run and saga
statuses, channel names, length limits. The request bodies the API checks field by field are
described once, beside the code that reads them (:mod:`awooop.bodies`), and shown here as
they describe themselves.
"""

from __future__ import annotations

from typing import Any

from awooop import errors
from awooop.channels import api as api_channel
from awooop.channels.base import MAX_EVENT_ID_LENGTH
from awooop.domain import states, tags
from awooop.engine import tools
from awooop.models.project import RUN_CHANNEL_TYPES
from awooop.web import approvals, management_api, reruns_api
from awooop.web.management_api import OPERATIONS

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: Schema) -> Schema:
    return {**schema, "nullable": True}


_TIME: Schema = {"type": "string", "format": "date-time"}
_RUN_STATUS: Schema = {"type": "string", "enum": list(states.RUN_STATUSES)}
_SAGA_STATUS: Schema = {"type": "string", "enum": list(states.SAGA_STATUSES)}

_RUN_SUMMARY_PROPERTIES: dict[str, Schema] = {
    "run_id": {"type": "string", "format": "uuid"},
    "channel_type": {"type": "string", "enum": list(RUN_CHANNEL_TYPES)},
    "workflow_name": {"type": "string"},
    "workflow_version": {"type": "integer"},
    "status": _RUN_STATUS,
    "saga_status": _SAGA_STATUS,
    "direction": {
        "type": "string",
        "enum": list(states.DIRECTIONS),
        "description": "BACKWARD while compensating.",
    },
    "control_state": {"type": "string", "enum": list(states.CONTROL_STATES)},
    "current_step": _nullable({"type": "string"}),
    "attempt_count": {"type": "integer", "minimum": 0},
    "max_attempts": {"type": "integer", "minimum": 1},
    "failure_code": _nullable({"type": "string"}),
    "failure_reason": _nullable({"type": "string"}),
    "version": {"type": "integer", "minimum": 0},
    "created_at": _TIME,
    "updated_at": _TIME,
    "finished_at": _nullable(_TIME),
    "rerun_of": {
        **_nullable({"type": "string", "format": "uuid"}),
        "description": "A rerun: the run whose input it started again with.",
    },
    "tags": {
        **_nullable(
            {
                "type": "object",
                "maxProperties": tags.MAX_TAGS,
                "additionalProperties": {"type": "string", "maxLength": tags.MAX_VALUE_LENGTH},
            }
        ),
        "description": "The tags the run's steps set (ctx.tag); null before any.",
    },
}
# The detail: everything the list shows, and more.
_RUN_PROPERTIES: dict[str, Schema] = {
    **_RUN_SUMMARY_PROPERTIES,
    "project_id": {"type": "string"},
    "input": {"type": "object", "description": "The event and its channel facts."},
    "output": {"description": "Step outputs once the run finished (any JSON, or null)."},
    "lease_until": _nullable(_TIME),
    "heartbeat_at": {
        **_nullable(_TIME),
        "description": "When the lease holder last renewed it (or its claim): a worker that "
        "is alive renews every AWOOOP_HEARTBEAT_INTERVAL_SECONDS.",
    },
    "worker_id": _nullable({"type": "string"}),
    "lease_epoch": {"type": "integer", "minimum": 0},
    "saga_steps": {
        "type": "array",
        "description": "The step journal: one entry per recorded step attempt, in order.",
        "items": {"type": "object"},
    },
    "rerun_key": {
        **_nullable({"type": "string"}),
        "description": "A rerun: the Idempotency-Key of the request that made it.",
    },
    "reruns": {
        "type": "array",
        "description": "The runs that reran this one, oldest first (the first 100).",
        "items": {
            "type": "object",
            "required": ["run_id", "status", "created_at"],
            "properties": {
                "run_id": {"type": "string", "format": "uuid"},
                "status": _RUN_STATUS,
                "created_at": _TIME,
            },
        },
    },
}
_RERUN: Schema = {
    "type": "object",
    "required": ["run_id", "rerun_of", "status", "available_at"],
    "properties": {
        "run_id": {"type": "string", "format": "uuid"},
        "rerun_of": {"type": "string", "format": "uuid"},
        "status": _RUN_STATUS,
        "available_at": {**_TIME, "description": "When it becomes claimable."},
        "code": {
            "type": "string",
            "enum": [errors.DUPLICATE_EVENT_CODE],
            "description": "Present on a duplicate: the run this key made before.",
        },
    },
}
_BULK_RERUN_RESULT: Schema = {
    "type": "object",
    "required": ["dry_run", "count", "more", "next_cursor", "limit", "rate"],
    "properties": {
        "dry_run": {"type": "boolean"},
        "count": {"type": "integer", "minimum": 0, "description": "Runs matched (at most limit)."},
        "more": {"type": "boolean", "description": "More runs match than the limit."},
        "next_cursor": _nullable({"type": "string"}),
        "limit": {"type": "integer"},
        "rate": {"type": "number"},
        "run_ids": {
            "type": "array",
            "description": "A dry run: the runs that would be rerun.",
            "items": {"type": "string", "format": "uuid"},
        },
        "runs": {"type": "array", "description": "The new runs.", "items": ref("Rerun")},
        "code": {"type": "string", "enum": [errors.DUPLICATE_EVENT_CODE]},
    },
}

_ADMITTED: Schema = {
    "type": "object",
    "required": ["run_id", "status"],
    "properties": {
        "run_id": {"type": "string", "format": "uuid"},
        "status": _RUN_STATUS,
        "code": {
            "type": "string",
            "enum": [errors.DUPLICATE_EVENT_CODE],
            "description": "Present on a duplicate: the run the event already made.",
        },
        "signal": {
            "type": "string",
            "description": "Present when the workflow correlated the event with its open run "
            "(`run_id`): the event went to that run as this signal.",
        },
    },
}
_IGNORED: Schema = {
    "type": "object",
    "required": ["status", "reason"],
    "properties": {"status": {"type": "string", "enum": ["ignored"]}, "reason": {"type": "string"}},
}
_DECISION: Schema = {
    "type": "object",
    "description": "An approval button pressed in the chat (no run is started).",
    "required": ["status", "event"],
    "properties": {
        "status": {"type": "string", "enum": ["approved", "rejected", "refused", "duplicate"]},
        "run_id": {"type": "string", "format": "uuid"},
        "reason": {
            "type": "string",
            "enum": ["not_found", "forbidden", "expired", "used", "not_waiting"],
        },
        "event": {"type": "string"},
    },
}

_WORKER_PROPERTIES: dict[str, Schema] = {
    "worker_id": {"type": "string", "description": "host:pid:boot-nonce, as runs name it."},
    "host": {"type": "string"},
    "pid": {"type": "integer"},
    "started_at": _TIME,
    "seen_at": {**_TIME, "description": "Its last beat."},
    "seen_seconds_ago": {
        "type": "number",
        "minimum": 0,
        "description": "Seconds since its last beat, by the database's clock.",
    },
    "judged_dead_at": _nullable(
        {**_TIME, "description": "When the reaper judged it dead and took its runs."}
    ),
    "runs_held": {
        "type": "integer",
        "minimum": 0,
        "description": "This project's RUNNING runs it holds.",
    },
}

SCHEMAS: dict[str, Schema] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string", "pattern": "^E-[A-Z]+(-[A-Z]+)*-[0-9]{3}$"},
                    "message": {"type": "string"},
                },
            }
        },
    },
    "Admitted": _ADMITTED,
    "StartWorkflow": api_channel.START_REQUEST.schema(),
    "Ignored": _IGNORED,
    "Decision": _DECISION,
    "LineAdmitted": {
        "type": "object",
        "required": ["runs"],
        "properties": {
            "status": {"type": "string", "enum": ["ok"], "description": "A verification ping."},
            "runs": {"type": "array", "items": ref("Admitted")},
            "decisions": {"type": "array", "items": ref("Decision")},
        },
    },
    "RunSummary": {
        "type": "object",
        "required": list(_RUN_SUMMARY_PROPERTIES),
        "properties": _RUN_SUMMARY_PROPERTIES,
    },
    "Run": {"type": "object", "required": list(_RUN_PROPERTIES), "properties": _RUN_PROPERTIES},
    "Rerun": _RERUN,
    "RerunRequest": reruns_api.RERUN_REQUEST.schema(),
    "BulkRerun": reruns_api.BULK_RERUN.schema(),
    "BulkRerunResult": _BULK_RERUN_RESULT,
    "RunPage": {
        "type": "object",
        "required": ["runs", "next_cursor"],
        "properties": {
            "runs": {"type": "array", "items": ref("RunSummary")},
            "next_cursor": _nullable({"type": "string"}),
        },
    },
    "RunEvent": {
        "type": "object",
        "required": ["seq", "kind", "trigger", "at"],
        "properties": {
            "seq": {"type": "integer", "minimum": 1},
            "kind": {"type": "string"},
            "from_status": _nullable({"type": "string"}),
            "to_status": _nullable({"type": "string"}),
            "trigger": {"type": "string"},
            "trigger_id": _nullable({"type": "string"}),
            "actor": _nullable({"type": "string"}),
            "detail": _nullable({"type": "object"}),
            "at": _TIME,
        },
    },
    "RunEventPage": {
        "type": "object",
        "required": ["events", "next_cursor"],
        "properties": {
            "events": {"type": "array", "items": ref("RunEvent")},
            "next_cursor": _nullable({"type": "string"}),
        },
    },
    "Operation": management_api.OPERATION.schema(),
    "OperationResult": {
        "type": "object",
        "required": [
            "run_id",
            "operation",
            "operation_id",
            "applied",
            "replayed",
            "status",
            "saga_status",
            "control_state",
            "version",
        ],
        "properties": {
            "run_id": {"type": "string", "format": "uuid"},
            "operation": {"type": "string", "enum": list(OPERATIONS.values())},
            "operation_id": {"type": "string"},
            "applied": {"type": "boolean"},
            "replayed": {"type": "boolean", "description": "This operation_id was seen before."},
            "status": _RUN_STATUS,
            "saga_status": _SAGA_STATUS,
            "control_state": {"type": "string", "enum": list(states.CONTROL_STATES)},
            "version": {"type": "integer", "minimum": 0},
        },
    },
    "ToolResult": tools.TOOL_RESULT.schema(),
    "ToolResultAnswer": {
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"type": "string", "enum": ["accepted", "duplicate", "late"]},
            "code": {"type": "string", "enum": [errors.DUPLICATE_EVENT_CODE]},
            "run_status": _RUN_STATUS,
            "compensation_run_id": {"type": "string", "format": "uuid"},
        },
    },
    "SignalAnswer": {
        "type": "object",
        "required": ["run_id", "signal", "signal_id", "status"],
        "properties": {
            "run_id": {"type": "string", "format": "uuid"},
            "signal": {"type": "string"},
            "signal_id": {"type": "string"},
            "status": {"type": "string", "enum": ["delivered", "kept", "duplicate"]},
            "code": {"type": "string", "enum": [errors.DUPLICATE_EVENT_CODE]},
        },
    },
    "ApprovalDecision": approvals.DECISION.schema(),
    "ApprovalDecided": {
        "type": "object",
        "required": ["status", "run_id"],
        "properties": {
            "status": {"type": "string", "enum": ["approved", "rejected"]},
            "run_id": {"type": "string", "format": "uuid"},
        },
    },
    "TelegramUpdate": {
        "type": "object",
        "description": "A Telegram Bot API `Update`; a `callback_query` from one of our "
        "approval buttons decides that approval instead of starting a run.",
        "required": ["update_id"],
        "properties": {"update_id": {"type": "integer"}},
    },
    "AlertmanagerNotification": {
        "type": "object",
        "description": "Alertmanager's webhook payload (version 4).",
        "required": ["receiver", "groupKey", "status", "alerts"],
        "properties": {
            "receiver": {"type": "string"},
            "groupKey": {"type": "string"},
            "status": {"type": "string", "enum": ["firing", "resolved"]},
            "alerts": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["fingerprint", "status", "startsAt", "endsAt"],
                    "properties": {
                        "fingerprint": {"type": "string"},
                        "status": {"type": "string"},
                        "startsAt": {"type": "string"},
                        "endsAt": {"type": "string"},
                    },
                },
            },
        },
    },
    "LineWebhook": {
        "type": "object",
        "description": "A LINE Messaging API webhook body: one run per event; no events is "
        "LINE's verification request. A `postback` from one of our approval buttons decides "
        "that approval instead.",
        "required": ["events"],
        "properties": {
            "destination": {"type": "string"},
            "events": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["webhookEventId"],
                    "properties": {
                        "webhookEventId": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": MAX_EVENT_ID_LENGTH,
                        }
                    },
                },
            },
        },
    },
    "WorkflowVersions": {
        "type": "object",
        "required": ["workflows"],
        "properties": {
            "workflows": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": [
                        "name",
                        "version",
                        "description",
                        "registered",
                        "digest",
                        "latest",
                        "open_runs",
                        "open_runs_other_digest",
                    ],
                    "properties": {
                        "name": {"type": "string"},
                        "version": {"type": "integer"},
                        "description": _nullable({"type": "string"}),
                        "registered": {
                            "type": "boolean",
                            "description": "This web process has this version registered.",
                        },
                        "digest": _nullable(
                            {
                                "type": "string",
                                "pattern": "^[0-9a-f]{64}$",
                                "description": "The registered definition's digest.",
                            }
                        ),
                        "latest": {
                            "type": "boolean",
                            "description": "The version new events start.",
                        },
                        "open_runs": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "The project's unfinished runs of this version.",
                        },
                        "open_runs_other_digest": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "Of those, the runs this process's definition "
                            "cannot run (not registered, or started on another digest).",
                        },
                    },
                },
            }
        },
    },
    "Workers": {
        "type": "object",
        "required": ["workers"],
        "properties": {
            "workers": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": list(_WORKER_PROPERTIES),
                    "properties": _WORKER_PROPERTIES,
                },
            }
        },
    },
    "ReadinessChecks": {
        "type": "object",
        "required": ["database", "broker"],
        "properties": {
            "database": {"type": "string", "enum": ["ok", "unreachable"]},
            "broker": {"type": "string", "enum": ["ok", "unreachable"]},
        },
    },
}

SECURITY_SCHEMES: dict[str, Schema] = {
    "apiToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "A project API token. Roles: `viewer` < `operator` < `admin` for the "
        "runs API; `ingest` only admits events, sends signals and delivers tool results.",
    },
    "telegramSecretToken": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Telegram-Bot-Api-Secret-Token",
        "description": "The secret token given to Telegram's setWebhook.",
    },
    "alertmanagerBearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "The project's Alertmanager secret.",
    },
    "alertmanagerBasic": {
        "type": "http",
        "scheme": "basic",
        "description": "Any user name; the password is the project's Alertmanager secret.",
    },
    "giteaSignature": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Gitea-Signature",
        "description": "Hex HMAC-SHA256 of the raw request body with the webhook secret.",
    },
    "lineSignature": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Line-Signature",
        "description": "Base64 HMAC-SHA256 of the raw request body with the channel secret.",
    },
}
