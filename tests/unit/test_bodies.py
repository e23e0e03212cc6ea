"""The request bodies the API checks field by field (:mod:`awooop.bodies`): what a body's
checks accept is what its schema in the OpenAPI document accepts, and a refusal is the
field's own error and message."""

from __future__ import annotations

import uuid
from typing import Any

import jsonschema
import pytest

from awooop import bodies, errors
from awooop.channels import api as api_channel
from awooop.engine import tools
from awooop.web import approvals, management_api, openapi_spec, reruns_api

ABSENT = object()
# Each body the API checks, with the smallest body it accepts.
BODIES: dict[str, tuple[bodies.Body, dict[str, Any]]] = {
    "StartWorkflow": (api_channel.START_REQUEST, {"workflow": "noop"}),
    "Operation": (management_api.OPERATION, {"operation_id": "op-1"}),
    "ApprovalDecision": (approvals.DECISION, {"decision": "approve"}),
    "ToolResult": (tools.TOOL_RESULT, {"event_id": "e-1", "step": "call", "status": "failed"}),
    "RerunRequest": (reruns_api.RERUN_REQUEST, {}),
    "BulkRerun": (reruns_api.BULK_RERUN, {}),
}
# Values of every JSON type, and the edges of the fields' lengths, numbers and choices.
CANDIDATES: list[Any] = [
    ABSENT,
    None,
    True,
    False,
    -1,
    0,
    1,
    7,
    0.25,
    1.5,
    1000,
    1001,
    12345678123456781234567812345678,  # its str() is a UUID's 32 hex digits
    "",
    " ",
    " \t\n",
    "x",
    " padded ",
    "approve",
    "reject",
    "succeeded",
    "rejected",
    str(uuid.uuid4()),
    "not-a-uuid",
    "a" * 128,
    "a" * 129,
    "a" * 200,
    "a" * 201,
    "a" * 256,
    "a" * 257,
    "a" * 1000,
    "a" * 1001,
    "a" * 2000,
    "a" * 2001,
    {},
    {"k": "v"},
    {"k": ["v", "w"]},
    {"k": []},
    {"k": 1},
    [],
    ["x"],
]


def json_schema(schema: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema: ``nullable`` lets null in."""
    if isinstance(schema, list):
        return [json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {key: json_schema(value) for key, value in schema.items() if key != "nullable"}
    if schema.get("exclusiveMinimum") is True:  # 3.0's form; JSON Schema's takes the bound
        converted["exclusiveMinimum"] = converted.pop("minimum")
    if schema.get("nullable"):
        converted = {"anyOf": [converted, {"type": "null"}]}
    return converted


def schema_accepts(name: str, body: dict[str, Any]) -> bool:
    schema = json_schema(openapi_spec.build()["components"]["schemas"][name])
    checker = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    return checker.is_valid(body)


def checks_accept(body_spec: bodies.Body, body: dict[str, Any]) -> bool:
    try:
        body_spec.parse(body)
    except errors.AwoooPError:
        return False
    return True


def with_value(base: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
    body = {key: item for key, item in base.items() if key != name}
    if value is not ABSENT:
        body[name] = value
    return body


@pytest.mark.parametrize("name", sorted(BODIES))
def test_the_checks_accept_what_the_documented_schema_accepts(name):
    body_spec, smallest = BODIES[name]
    disagreements = [
        (field.name, value)
        for field in body_spec.fields
        for value in CANDIDATES
        if checks_accept(body_spec, body := with_value(smallest, field.name, value))
        != schema_accepts(name, body)
    ]

    assert checks_accept(body_spec, smallest)
    assert disagreements == []


@pytest.mark.parametrize("name", sorted(BODIES))
def test_a_key_no_field_has_is_refused_where_the_schema_refuses_it(name):
    body_spec, smallest = BODIES[name]
    body = {**smallest, "unexpected": 1}

    assert checks_accept(body_spec, body) == schema_accepts(name, body)


def test_the_first_field_in_error_answers_with_its_message():
    with pytest.raises(errors.MalformedRequest) as refused:
        approvals.DECISION.parse({"decision": "maybe", "actor": ""})

    assert str(refused.value) == 'decision must be "approve" or "reject"'


def test_a_field_may_answer_with_its_own_error():
    with pytest.raises(errors.InvalidOperation) as refused:
        management_api.OPERATION.parse({"reason": "no id"})

    assert refused.value.code == "E-OPERATION-004"


def test_parsed_values_are_what_the_code_uses():
    run_id = uuid.UUID(int=1)
    decision = approvals.DECISION.parse(
        {"decision": "reject", "actor": "  alice ", "comment": None, "run_id": str(run_id)}
    )
    operation = management_api.OPERATION.parse({"operation_id": "op", "reason": None})
    start = api_channel.START_REQUEST.parse({"workflow": "noop"})

    assert decision == {"decision": "reject", "actor": "alice", "run_id": run_id}
    assert operation == {"operation_id": "op", "reason": ""}
    assert start == {"workflow": "noop", "input": {}}
