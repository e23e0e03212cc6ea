"""The fields of the console's action forms, read and checked in one place: an operation id
as the confirmation page made it, and free text (a reason, a comment) within its length and
storable by PostgreSQL. What fails is a 400 page that names the field; nothing is written."""

from __future__ import annotations

from flask import request

from awooop import errors
from awooop.channels.base import storable_text
from awooop.web import management_api


def operation_id() -> str:
    """The form's ``operation_id``: printable ASCII, as the confirmation page renders it (any
    other is a form that did not come from this console)."""
    value = request.form.get("operation_id", "")
    if not (
        0 < len(value) <= management_api.MAX_OPERATION_ID
        and value.isascii()
        and value.isprintable()
    ):
        raise errors.FormRefused()
    return value


def free_text(name: str, max_length: int) -> str:
    """The form's field ``name`` (a reason, a comment), stripped; empty when absent."""
    value = request.form.get(name, "").strip()
    if len(value) > max_length:
        raise errors.MalformedRequest(f"The {name} is too long: at most {max_length} characters.")
    if not storable_text(value):
        raise errors.MalformedRequest(f"The {name} must not contain NUL characters.")
    return value
