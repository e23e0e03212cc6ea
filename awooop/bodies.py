"""The JSON request bodies the API accepts, each described once: the checks a request gets
and the schema the OpenAPI document shows come from the same :class:`Body`.

A :class:`Body` lists its :class:`Field` s. :meth:`Body.parse` checks a decoded JSON object
field by field, in order, and answers the first problem with the field's own message (a 400
``E-REQUEST-001`` unless the field names another error); :meth:`Body.schema` is the
component schema. Each body is declared beside the code that reads it: the start request in
:mod:`awooop.channels.api`, operations in :mod:`awooop.web.management_api`, approval
decisions in :mod:`awooop.web.approvals`, tool results in :mod:`awooop.engine.tools`, reruns
in :mod:`awooop.web.reruns_api`.

Why not pydantic or jsonschema: neither is a runtime dependency, and the bodies need a few
field kinds (strings with lengths or choices, bounded numbers, booleans, objects, UUIDs,
anything)
and messages written for each field; a schema validator would name JSON paths instead, and
pydantic would add a compiled runtime dependency to every process for four bodies.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from awooop import errors

Schema = dict[str, Any]

# "strings": an object whose every value is a string or a non-empty list of strings (a query's
# parameters by name).
KINDS = ("string", "integer", "number", "boolean", "object", "strings", "uuid", "any")


@dataclass(frozen=True)
class Field:
    """One key of a body: what its value must be, and the message when it is not."""

    name: str
    kind: str
    # The whole message of the error for a missing (when required) or invalid value.
    message: str
    required: bool = False
    # null is taken as the key left out.
    nullable: bool = False
    # What a key left out becomes (called for each request); None: left out of the result.
    default: Callable[[], Any] | None = None
    min_length: int | None = None
    max_length: int | None = None
    # Surrounding whitespace dropped from the value; a blank one refused.
    strip: bool = False
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    description: str | None = None
    error: type[errors.AwoooPError] = errors.MalformedRequest

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind

    def check(self, value: Any) -> Any:
        """The value as the code uses it, or the field's error."""
        if self.kind == "string" and isinstance(value, str):
            long_enough = self.min_length is None or len(value) >= self.min_length
            short_enough = self.max_length is None or len(value) <= self.max_length
            chosen = self.choices is None or value in self.choices
            if long_enough and short_enough and chosen and (value.strip() or not self.strip):
                return value.strip() if self.strip else value
        elif self.kind in ("integer", "number") and self._is_number(value):
            if (self.minimum is None or value >= self.minimum) and (
                self.maximum is None or value <= self.maximum
            ):
                return value
        elif isinstance(value, _PYTHON_TYPES.get(self.kind, ())):
            return value
        elif self.kind == "strings" and isinstance(value, dict):
            if all(_string_or_strings(item) for item in value.values()):
                return value
        elif self.kind == "uuid" and isinstance(value, str):
            try:
                return uuid.UUID(value)
            except ValueError:
                pass
        elif self.kind == "any":
            return value
        raise self.error(self.message)

    def _is_number(self, value: Any) -> bool:
        # bool is an int in Python, never a number here.
        kinds = (int,) if self.kind == "integer" else (int, float)
        return isinstance(value, kinds) and not isinstance(value, bool)

    def schema(self) -> Schema:
        schema: Schema = {}
        if self.kind != "any":
            schema["type"] = {"uuid": "string", "strings": "object"}.get(self.kind, self.kind)
        if self.kind == "strings":
            schema["additionalProperties"] = {
                "oneOf": [
                    {"type": "string"},
                    {"type": "array", "minItems": 1, "items": {"type": "string"}},
                ]
            }
        if self.kind == "uuid":
            schema["format"] = "uuid"
        for key, value in (
            ("minLength", self.min_length),
            ("maxLength", self.max_length),
            ("enum", list(self.choices) if self.choices is not None else None),
            ("minimum", self.minimum),
            ("maximum", self.maximum),
            ("description", self.description),
        ):
            if value is not None:
                schema[key] = value
        if self.strip:
            schema["pattern"] = r"\S"
        if self.nullable:
            schema["nullable"] = True
        return schema


# The kinds whose value is taken as JSON decoded it.
_PYTHON_TYPES: dict[str, type] = {"boolean": bool, "object": dict}


def _string_or_strings(value: Any) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


@dataclass(frozen=True)
class Body:
    """A JSON object a request sends: its fields, in the order they are checked."""

    fields: tuple[Field, ...]
    description: str | None = None
    # Refuse keys no field has, with this message ({keys}: theirs, sorted); None: ignore them.
    unknown_keys: str | None = None

    def parse(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The checked values by field name (a field left out and without a default is not
        in it), or the first field's error."""
        if self.unknown_keys is not None:
            unknown = sorted(set(body) - {f.name for f in self.fields})
            if unknown:
                raise errors.MalformedRequest(self.unknown_keys.format(keys=", ".join(unknown)))
        values: dict[str, Any] = {}
        for field in self.fields:
            value = body.get(field.name)
            if field.name not in body or (value is None and field.nullable):
                if field.required:
                    raise field.error(field.message)
                if field.default is not None:
                    values[field.name] = field.default()
                continue
            values[field.name] = field.check(value)
        return values

    def schema(self) -> Schema:
        schema: Schema = {"type": "object"}
        if self.description is not None:
            schema["description"] = self.description
        required = [f.name for f in self.fields if f.required]
        if required:
            schema["required"] = required
        if self.unknown_keys is not None:
            schema["additionalProperties"] = False
        schema["properties"] = {f.name: f.schema() for f in self.fields}
        return schema
