"""Driving the ops console's HTML forms with Flask's test client."""

from __future__ import annotations

import html
import re
from typing import Any

_HIDDEN = re.compile(r'<input type="hidden" name="(?P<name>[a-z_]+)" value="(?P<value>[^"]*)">')


def hidden_fields(page: str) -> dict[str, str]:
    """The hidden fields of the page's forms (the last one of a name wins)."""
    return {m["name"]: html.unescape(m["value"]) for m in _HIDDEN.finditer(page)}


def text(response: Any) -> str:
    return response.get_data(as_text=True)


def login(client: Any, project_id: str, token: str, next_page: str | None = None) -> Any:
    """Open the sign-in page (which starts a session with a CSRF token), then sign in."""
    page = text(client.get("/console/login"))
    form = {
        "csrf_token": hidden_fields(page)["csrf_token"],
        "project_id": project_id,
        "token": token,
    }
    if next_page is not None:
        form["next"] = next_page
    return client.post("/console/login", data=form)


def confirm_form(client: Any, run_id: object, segment: str, **query: Any) -> dict[str, str]:
    """The hidden fields of an action's confirmation page."""
    response = client.get(f"/console/runs/{run_id}/{segment}", query_string=query)
    assert response.status_code == 200, text(response)
    return hidden_fields(text(response))


def submit(client: Any, run_id: object, segment: str, form: dict[str, str], reason: str) -> Any:
    return client.post(f"/console/runs/{run_id}/{segment}", data={**form, "reason": reason})
