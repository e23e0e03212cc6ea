"""The OpenAPI document: valid, in step with the Flask app's routes, complete about errors,
and served at ``GET /openapi.json`` without credentials, cacheable.

Nothing here opens a connection: the app is built over a database that is never reached.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from openapi_spec_validator import validate

from awooop import db, errors, secrets
from awooop.config import Settings
from awooop.web import openapi_spec
from awooop.web.app import create_app

# Flask answers these for every route by itself; the document lists the methods a view has.
IMPLICIT_METHODS = {"HEAD", "OPTIONS"}
# Static files: the app's own and the console's.
STATIC_ENDPOINTS = {"static", "console.static"}
# The ops console: HTML pages and forms for browsers (CSRF-protected, session sign-in), not
# part of the JSON API, so not in the document. Listed one by one: a new console route fails
# the drift test below until it is added here (or documented).
CONSOLE_PAGES = {
    ("/console/", "GET"),
    ("/console/login", "GET"),
    ("/console/login", "POST"),
    ("/console/logout", "POST"),
    ("/console/runs", "GET"),
    ("/console/interventions", "GET"),
    ("/console/workflows", "GET"),
    ("/console/runs/<run_id>", "GET"),
    ("/console/runs/<run_id>/<segment>", "GET"),
    ("/console/runs/<run_id>/<segment>", "POST"),
    ("/console/approvals", "GET"),
    ("/console/approvals/<approval_id>", "POST"),
    ("/console/bulk/<segment>", "GET"),
    ("/console/bulk/<segment>", "POST"),
    ("/console/workers", "GET"),
    ("/console/projects", "GET"),
    ("/console/projects/<project_id>/enter", "POST"),
}
# Errors no operation documents: 405 is the answer to a method an operation does not have,
# an internal error is a bug (the property-based run fails on any 5xx), and the console's
# own errors are shown on its pages.
UNDOCUMENTED_ERRORS = {
    errors.AwoooPError,
    errors.MethodNotAllowed,
    errors.InternalError,
    errors.FormRefused,
    errors.RunChanged,
}
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


@pytest.fixture(scope="module")
def app() -> Flask:
    settings = Settings(
        database_url="postgresql+psycopg2://nobody@127.0.0.1:9/never",
        broker_url="",
        secret_key=secrets.new_encryption_key(),
        log_level="WARNING",
    )
    engine = db.make_engine(settings.database_url, pool_size=1)  # connects on first use only
    return create_app(settings, engine, enqueue=lambda ids: 0, notify=lambda ids: 0)


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return openapi_spec.build()


def operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield path, method.upper(), operation


def app_routes(app: Flask) -> set[tuple[str, str]]:
    """(rule, method) for every route of the app but static files."""
    return {
        (rule.rule, method)
        for rule in app.url_map.iter_rules()
        if rule.endpoint not in STATIC_ENDPOINTS
        for method in (rule.methods or set()) - IMPLICIT_METHODS
    }


def matching_rule(app: Flask, path: str, method: str) -> str | None:
    """The app's rule a request for this documented path and method reaches, if any.

    Path parameters are filled with a sample value: every rule variable here is a plain
    string segment, so any value reaches the same rule.
    """
    concrete = re.sub(r"\{[^}/]+\}", "x", path)
    adapter = app.url_map.bind("localhost")
    try:
        rule, _ = adapter.match(concrete, method=method, return_rule=True)
    except Exception:  # NotFound, MethodNotAllowed, RequestRedirect
        return None
    return None if rule.endpoint in STATIC_ENDPOINTS else rule.rule


def test_the_document_is_valid_openapi_3(spec):
    validate(spec)


def test_every_documented_operation_exists_in_the_app(app, spec):
    missing = [
        f"{method} {path}"
        for path, method, _ in operations(spec)
        if matching_rule(app, path, method) is None
    ]
    assert missing == []


def test_every_route_of_the_app_is_documented_with_the_same_methods(app, spec):
    """Each Flask route and method (``app.url_map`` without the implicit HEAD and OPTIONS)
    must be reached by some documented operation — except static files and the ops
    console's HTML pages, which are excluded explicitly (``CONSOLE_PAGES``): the document
    describes the JSON API. A rule with a variable may be documented as several concrete
    paths — the webhook channels are, each with its own authentication — and all of them
    must exist, as the test above checks.
    """
    documented = {
        (matching_rule(app, path, method), method) for path, method, _ in operations(spec)
    }
    undocumented = sorted(
        f"{method} {rule}"
        for rule, method in app_routes(app) - CONSOLE_PAGES
        if (rule, method) not in documented
    )
    assert undocumented == []


def test_the_excluded_console_pages_exist_and_are_not_documented(app, spec):
    assert app_routes(app) >= CONSOLE_PAGES
    assert [path for path in spec["paths"] if path.startswith("/console")] == []


def test_each_webhook_channel_is_documented_as_its_own_path(spec):
    from awooop.channels import CHANNELS

    documented = {path.rsplit("/", 1)[1] for path in spec["paths"] if "/webhooks/" in path}
    assert documented == set(CHANNELS) - {"api"}


def test_every_client_visible_error_code_is_documented_with_its_status(spec):
    documented: set[tuple[str, str]] = set()
    for _, _, operation in operations(spec):
        for status, response in operation["responses"].items():
            for example in (
                response.get("content", {}).get("application/json", {}).get("examples", {})
            ):
                documented.add((status, example))
    catalogue = {
        (str(cls.http_status), cls.code)
        for cls in _subclasses(errors.AwoooPError)
        if cls not in UNDOCUMENTED_ERRORS and not cls.__name__.startswith("_")
    }
    assert catalogue - documented == set()


def test_every_rate_limited_or_unavailable_answer_documents_retry_after(spec):
    for path, method, operation in operations(spec):
        for status in ("429", "503"):
            if status in operation["responses"]:
                headers = operation["responses"][status].get("headers", {})
                assert "Retry-After" in headers, f"{method} {path} {status}"


def test_api_operations_state_their_security_and_public_ones_need_none(spec):
    public = {"/healthz", "/readyz", "/metrics", "/openapi.json"}
    assert spec["security"] == [{"apiToken": []}]
    for path, method, operation in operations(spec):
        if path in public:
            assert operation["security"] == [], path
        elif "/webhooks/" in path:
            schemes = {name for option in operation["security"] for name in option}
            assert schemes and "apiToken" not in schemes, path
        else:
            assert "security" not in operation, f"{method} {path} inherits the API token"


def test_openapi_json_is_served_without_credentials_and_is_cacheable(app, spec):
    client = app.test_client()

    response = client.get("/openapi.json")

    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.json == spec
    assert response.cache_control.public and response.cache_control.max_age > 0
    assert response.headers["ETag"]


def test_openapi_json_revalidates_with_its_etag(app):
    client = app.test_client()
    etag = client.get("/openapi.json").headers["ETag"]

    response = client.get("/openapi.json", headers={"If-None-Match": etag})

    assert response.status_code == 304
    assert response.data == b""


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found
