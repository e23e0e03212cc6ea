"""The console's page cursors are taken only by the page that issued them: the same list,
project and filters (or run). Anything else is a 400 page that says so, never a page that
starts in the middle of another list."""

from __future__ import annotations

import html
import re
import uuid

import pytest

from awooop import cli
from awooop.engine import runner
from awooop.web.console import approvals as console_approvals
from awooop.web.console import views as console_views
from tests.support import runs as test_runs
from tests.support import tokens
from tests.support.console import login, text

_NEXT = re.compile(r'href="(?P<url>[^"]*cursor=[^"]*)"')


def next_url(response) -> str:
    assert response.status_code == 200, text(response)
    (url,) = {html.unescape(m["url"]) for m in _NEXT.finditer(text(response))}
    return url


def cursor_of(url: str) -> str:
    (cursor,) = re.findall(r"cursor=([^&]+)", url)
    return cursor


def refused(response) -> bool:
    return (
        response.status_code == 400
        and response.mimetype == "text/html"
        and "cursor is not one this list returned" in text(response)
    )


@pytest.fixture
def runs_pages(monkeypatch, engine, project):
    """Two pages of noop-3 runs in the test project."""
    monkeypatch.setattr(console_views, "PAGE_SIZE", 1)
    return [test_runs.admit(engine, project["project_id"], "noop-3") for _ in range(2)]


def test_a_runs_cursor_is_taken_with_its_own_filters_in_any_order(operator, runs_pages):
    url = next_url(operator.get("/console/runs?workflow=noop-3&status=PENDING"))
    cursor = cursor_of(url)

    same = operator.get(f"/console/runs?status=PENDING&workflow=noop-3&cursor={cursor}")
    followed = operator.get(url)

    assert (same.status_code, followed.status_code) == (200, 200)
    assert "« First page" in text(followed)


@pytest.mark.parametrize(
    "query",
    [
        "",  # no filters at all
        "workflow=noop-3",  # one filter fewer
        "workflow=noop-3&status=RUNNING",  # another value
    ],
)
def test_a_runs_cursor_with_other_filters_is_a_400_page(operator, runs_pages, query):
    cursor = cursor_of(next_url(operator.get("/console/runs?workflow=noop-3&status=PENDING")))

    response = operator.get(f"/console/runs?{query}&cursor={cursor}")

    assert refused(response), text(response)
    assert "same filters" in text(response)


def test_an_empty_filter_field_is_no_filter(operator, runs_pages):
    """The filter form sends every field, empty ones too: they bind nothing."""
    cursor = cursor_of(next_url(operator.get("/console/runs?workflow=noop-3&status=&tag=")))

    assert operator.get(f"/console/runs?workflow=noop-3&cursor={cursor}").status_code == 200


def test_a_runs_cursor_of_another_project_is_a_400_page(
    client, settings, engine, project, role_tokens, runs_pages
):
    assert login(client, project["project_id"], role_tokens["operator"]).status_code == 303
    cursor = cursor_of(next_url(client.get("/console/runs")))
    other = cli.create_project(settings, f"o{uuid.uuid4().hex[:8]}")
    other_token = tokens.add(engine, other["project_id"], "operator")
    assert login(client, other["project_id"], other_token).status_code == 303

    assert refused(client.get(f"/console/runs?cursor={cursor}"))


def test_a_run_events_cursor_is_taken_only_on_its_own_run(
    monkeypatch, operator, engine, settings, project
):
    monkeypatch.setattr(console_views, "EVENTS_PAGE_SIZE", 1)
    first, second = (test_runs.admit(engine, project["project_id"], "noop-3") for _ in range(2))
    for run_id in (first, second):
        assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    url = next_url(operator.get(f"/console/runs/{first}"))

    assert operator.get(url).status_code == 200
    assert refused(operator.get(f"/console/runs/{second}?cursor={cursor_of(url)}"))


def test_an_approvals_cursor_of_another_project_is_a_400_page(
    monkeypatch, client, settings, engine, project, role_tokens
):
    monkeypatch.setattr(console_approvals, "PAGE_SIZE", 1)
    for _ in range(2):
        run_id = test_runs.admit(engine, project["project_id"], "test-approval")
        assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_APPROVAL
    assert login(client, project["project_id"], role_tokens["operator"]).status_code == 303
    url = next_url(client.get("/console/approvals"))
    assert client.get(url).status_code == 200
    other = cli.create_project(settings, f"o{uuid.uuid4().hex[:8]}")
    other_token = tokens.add(engine, other["project_id"], "operator")
    assert login(client, other["project_id"], other_token).status_code == 303

    assert refused(client.get(f"/console/approvals?cursor={cursor_of(url)}"))
