"""The console's overview against a real PostgreSQL: runs seeded in known statuses and at known
finish times (another project's and older ones around them) must show as the numbers and SVG
bars of the page, and every link must lead to a run list holding exactly the runs counted."""

from __future__ import annotations

import html
import re
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text as sql

from awooop import cli
from awooop.store import overview as store_overview
from awooop.store import queries
from awooop.web import overview
from tests.support import overview as seed
from tests.support.console import login, text

_STAT = re.compile(
    r'<a class="stat [^"]*" href="(?P<href>[^"]*)" data-status="(?P<status>\w+)">\s*'
    r'<span class="stat-n">(?P<n>[\d,]+\+?)</span>'
)
_BAR = re.compile(
    r'<g class="bar" data-minute="(?P<minute>\d\d:\d\d)" data-total="(?P<total>\d+)">'
)
_SEGMENT = re.compile(
    r'<a href="(?P<href>[^"]*)"><rect class="(?P<css>[\w-]+)" x="(?P<x>[\d.]+)" '
    r'y="(?P<y>[\d.]+)" width="(?P<width>[\d.]+)" height="(?P<height>[\d.]+)" '
    r'data-count="(?P<count>\d+)">'
)
_RUN_ROW = re.compile(r'href="/console/runs/(?P<run_id>[0-9a-f-]{36})"')


def minute_of(finished_at: datetime | None) -> str:
    assert finished_at is not None
    return finished_at.astimezone(UTC).strftime("%H:%M")


def listed(client, href: str) -> set[uuid.UUID]:
    """The runs a run-list address shows (all pages)."""
    found: set[uuid.UUID] = set()
    url: str | None = html.unescape(href)
    while url:
        page = client.get(url)
        assert page.status_code == 200, text(page)
        body = text(page)
        found |= {uuid.UUID(m["run_id"]) for m in _RUN_ROW.finditer(body)}
        nxt = re.search(r'<a href="([^"]*)">Next page', body)
        url = html.unescape(nxt.group(1)) if nxt else None
    return found


def bars(page: str) -> dict[str, tuple[int, list[dict[str, str]]]]:
    """minute -> (total, segments bottom-up) of the chart."""
    found = {}
    chunks = page.split('<g class="bar" ')[1:]
    for chunk in chunks:
        head = _BAR.match('<g class="bar" ' + chunk)
        assert head is not None
        body = chunk.split("</g>", 1)[0]
        found[head["minute"]] = (
            int(head["total"]),
            [m.groupdict() for m in _SEGMENT.finditer(body)],
        )
    return found


@pytest.fixture
def seeded(engine, settings, project):
    """One project's runs now and over the last hours, plus noise the page must leave out."""
    pid = project["project_id"]
    ids: dict[str, list[tuple[uuid.UUID, datetime | None]]] = {}
    # Unfinished runs, now
    ids["pending"] = seed.runs(engine, pid, "PENDING", 3)
    ids["running"] = seed.runs(engine, pid, "RUNNING", 1)
    ids["waiting_tool"] = seed.runs(engine, pid, "WAITING_TOOL", 1)
    ids["approval"] = seed.runs(engine, pid, "WAITING_APPROVAL", 1)
    # The intervention queue: the older run is at its head
    ids["stuck_old"] = seed.runs(
        engine,
        pid,
        "WAITING_APPROVAL",
        saga_status="MANUAL_INTERVENTION",
        waiting_minutes=125,
        workflow="test-halt-once",
        current_step="check",
        failure_reason="disk state unknown",
    )
    ids["stuck_new"] = seed.runs(
        engine, pid, "WAITING_APPROVAL", saga_status="MANUAL_INTERVENTION", waiting_minutes=5
    )
    # Finished inside the three-hour window
    ids["done_5"] = seed.runs(engine, pid, "COMPLETED", 2, finished_ago=5)
    ids["fail_5"] = seed.runs(engine, pid, "FAILED", 2, finished_ago=5, failure_code="E-STEP-001")
    ids["done_30"] = seed.runs(engine, pid, "COMPLETED", 1, finished_ago=30)
    ids["fail_30"] = seed.runs(
        engine, pid, "FAILED", 1, finished_ago=30, failure_code="E-APPROVAL-002"
    )
    ids["cancel_60"] = seed.runs(engine, pid, "CANCELLED", 1, finished_ago=60)
    ids["done_170"] = seed.runs(engine, pid, "COMPLETED", 1, finished_ago=170)
    # Finished before the window
    ids["done_200"] = seed.runs(engine, pid, "COMPLETED", 1, finished_ago=200)
    ids["fail_240"] = seed.runs(engine, pid, "FAILED", 1, finished_ago=240, failure_code="E-X-001")
    # The outbox: two messages waiting for one run, one parked for another, one sent
    seed.outbox(engine, pid, ids["approval"][0][0], "PENDING", 2)
    seed.outbox(engine, pid, ids["fail_5"][0][0], "PARKED", 1)
    seed.outbox(engine, pid, ids["done_30"][0][0], "SENT", 1)
    # Another project's runs and messages, in the same minutes
    other = cli.create_project(settings, f"o{uuid.uuid4().hex[:8]}")["project_id"]
    seed.runs(engine, other, "PENDING", 2)
    seed.runs(engine, other, "WAITING_APPROVAL", saga_status="MANUAL_INTERVENTION")
    other_done = seed.runs(engine, other, "COMPLETED", 3, finished_ago=5)
    seed.outbox(engine, other, other_done[0][0], "PENDING", 4)
    return ids


def run_ids(*groups: list[tuple[uuid.UUID, datetime | None]]) -> set[uuid.UUID]:
    return {run_id for group in groups for run_id, _ in group}


def test_the_first_page_after_sign_in_is_the_overview(client, project):
    response = login(client, project["project_id"], project["api_token"])

    assert response.headers["Location"] == "/console/"
    page = client.get("/console/")
    assert page.status_code == 200
    assert "<h1>Overview</h1>" in text(page)
    assert 'aria-current="page">Overview</a>' in text(page)
    # the CSP stays script-free and style-free: the chart needs neither
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "style-src 'self'" in policy
    assert "<script" not in text(page) and "style=" not in text(page)
    assert "<style" not in text(page) and not re.search(r"\son[a-z]+=", text(page))


def test_runs_by_status_show_the_projects_runs_now_and_finished_in_the_window(
    client, project, seeded
):
    login(client, project["project_id"], project["api_token"])

    page = text(client.get("/console/"))

    stats = {m["status"]: (m["n"], m["href"]) for m in _STAT.finditer(page)}
    assert {s: n for s, (n, _) in stats.items()} == {
        "PENDING": "3",
        "RUNNING": "1",
        "WAITING_TOOL": "1",
        "WAITING_APPROVAL": "3",
        "RESUMED": "0",
        "COMPLETED": "4",
        "FAILED": "3",
        "CANCELLED": "1",
    }
    # each number links to exactly its runs
    assert listed(client, stats["PENDING"][1]) == run_ids(seeded["pending"])
    assert listed(client, stats["WAITING_APPROVAL"][1]) == run_ids(
        seeded["approval"], seeded["stuck_old"], seeded["stuck_new"]
    )
    assert listed(client, stats["COMPLETED"][1]) == run_ids(
        seeded["done_5"], seeded["done_30"], seeded["done_170"]
    )
    assert listed(client, stats["FAILED"][1]) == run_ids(seeded["fail_5"], seeded["fail_30"])


def test_the_chart_has_one_bar_per_minute_with_runs_stacked_by_outcome_and_failure_code(
    client, project, seeded
):
    login(client, project["project_id"], project["api_token"])

    page = text(client.get("/console/"))

    shown = bars(page)
    five, thirty = minute_of(seeded["done_5"][0][1]), minute_of(seeded["done_30"][0][1])
    sixty, old = minute_of(seeded["cancel_60"][0][1]), minute_of(seeded["done_170"][0][1])
    assert {m: total for m, (total, _) in shown.items()} == {five: 4, thirty: 2, sixty: 1, old: 1}
    # Segments bottom-up: completed, cancelled, then failures by code (most frequent first)
    assert [(s["css"], s["count"]) for s in shown[five][1]] == [
        ("s-completed", "2"),
        ("s-fail-0", "2"),
    ]
    assert [(s["css"], s["count"]) for s in shown[thirty][1]] == [
        ("s-completed", "1"),
        ("s-fail-1", "1"),
    ]
    assert [(s["css"], s["count"]) for s in shown[sixty][1]] == [("s-cancelled", "1")]
    # Heights are proportional on a 0..5 scale (the busiest minute has 4) and stack up
    assert 'data-y-max="5"' in page
    plot = overview.HEIGHT - overview.BOTTOM - overview.TOP
    bottom = float(overview.HEIGHT - overview.BOTTOM)
    for _, segments in shown.values():
        for segment in segments:
            assert float(segment["height"]) == pytest.approx(int(segment["count"]) * plot / 5)
            assert float(segment["y"]) + float(segment["height"]) == pytest.approx(bottom)
            bottom = float(segment["y"])
        bottom = float(overview.HEIGHT - overview.BOTTOM)
    # Bars stand in time order: later minutes further right
    xs = {m: float(segs[0]["x"]) for m, (_, segs) in shown.items()}
    assert xs[old] < xs[sixty] < xs[thirty] < xs[five]
    # Each segment links to the runs it counts
    assert listed(client, shown[five][1][0]["href"]) == run_ids(seeded["done_5"])
    assert listed(client, shown[five][1][1]["href"]) == run_ids(seeded["fail_5"])
    assert listed(client, shown[thirty][1][1]["href"]) == run_ids(seeded["fail_30"])


def test_the_chart_and_its_links_are_in_utc_whatever_the_sessions_time_zone(
    client, engine, project, database_url
):
    from sqlalchemy.engine import make_url

    # A database whose sessions run at UTC+05:45, where minutes fall on other hours
    name = make_url(database_url).database
    with engine.connect() as conn:
        conn.execute(sql(f"ALTER DATABASE \"{name}\" SET timezone = 'Asia/Kathmandu'"))
    engine.dispose()
    done = seed.runs(engine, project["project_id"], "COMPLETED", 2, finished_ago=7)
    login(client, project["project_id"], project["api_token"])

    page = text(client.get("/console/"))

    ((total, segments),) = bars(page).values()
    assert list(bars(page)) == [minute_of(done[0][1])] and total == 2
    assert listed(client, segments[0]["href"]) == run_ids(done)
    assert "UTC+" not in page and "+05:45" not in page


def test_failure_codes_in_the_legend_link_to_their_runs(client, project, seeded):
    login(client, project["project_id"], project["api_token"])

    page = text(client.get("/console/"))

    legend = page.split('<ul class="legend">', 1)[1].split("</ul>", 1)[0]
    entries = re.findall(
        r'<a href="([^"]*)">.*?(Completed|Cancelled|<span class="mono">([\w-]+)</span>)</a> '
        r'<span class="muted">(\d+)</span>',
        legend,
    )
    by_name = {code or name: (href, int(n)) for href, name, code, n in entries}
    assert {k: n for k, (_, n) in by_name.items()} == {
        "Completed": 4,
        "Cancelled": 1,
        "E-STEP-001": 2,
        "E-APPROVAL-002": 1,
    }
    assert "E-X-001" not in page  # failed before the window
    assert listed(client, by_name["E-STEP-001"][0]) == run_ids(seeded["fail_5"])
    assert listed(client, by_name["E-APPROVAL-002"][0]) == run_ids(seeded["fail_30"])


def test_the_intervention_queue_shows_its_size_and_its_oldest_run(client, project, seeded):
    login(client, project["project_id"], project["api_token"])

    page = text(client.get("/console/"))

    section = page.split('<section class="overview-queue">', 1)[1].split("</section>", 1)[0]
    count = re.search(r'<a href="([^"]*)" data-count="(\d+)">', section)
    assert count is not None and count.group(2) == "2"
    assert listed(client, count.group(1)) == run_ids(seeded["stuck_old"], seeded["stuck_new"])
    oldest = seeded["stuck_old"][0][0]
    assert f'href="/console/runs/{oldest}"' in section
    assert "test-halt-once" in section and "<strong>check</strong>" in section
    assert re.search(r'<dd class="oldest-wait">2 h 0[45] min', section)
    assert "disk state unknown" in section


def test_the_outbox_backlog_counts_unsent_messages_and_links_to_their_runs(client, project, seeded):
    login(client, project["project_id"], project["api_token"])

    page = text(client.get("/console/"))

    section = page.split('<section class="overview-outbox">', 1)[1].split("</section>", 1)[0]
    links = dict(
        (cls, (href, n))
        for href, cls, n in re.findall(
            r'<a href="([^"]*)" class="(backlog-\w+)[^"]*" data-count="(\d+)">', section
        )
    )
    assert {k: n for k, (_, n) in links.items()} == {"backlog-pending": "2", "backlog-parked": "1"}
    assert "the oldest has waited 20 min" in section  # of two, created 10 and 20 min ago
    assert listed(client, links["backlog-pending"][0]) == run_ids(seeded["approval"])
    assert listed(client, links["backlog-parked"][0]) == {seeded["fail_5"][0][0]}


def test_an_empty_project_has_an_empty_chart_and_zeros(client, project):
    login(client, project["project_id"], project["api_token"])

    page = text(client.get("/console/"))

    assert "No run finished in the last 3 hours." in page
    assert '<g class="bar"' not in page
    assert Counter(m["n"] for m in _STAT.finditer(page)) == Counter({"0": 8})
    assert "Nothing waits for a person." in page


def test_counts_stop_at_the_cap(client, project, engine, monkeypatch):
    from awooop.web.console import views as console

    monkeypatch.setattr(console, "OVERVIEW_CAP", 2)
    seed.runs(engine, project["project_id"], "PENDING", 3)
    login(client, project["project_id"], project["api_token"])

    page = text(client.get("/console/"))

    stats = {m["status"]: m["n"] for m in _STAT.finditer(page)}
    assert stats["PENDING"] == "2+" and stats["RUNNING"] == "0"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"finished_from": "an hour ago"}, "finished_from must be a time like"),
        ({"finished_until": "2026-13-01T00:00"}, "finished_until must be a time like"),
        ({"outbox": "SENT"}, "outbox &#39;SENT&#39; is not one of: PENDING, PARKED"),
        ({"failure_code": "E" * 65}, "failure_code must be 1 to 64 printable characters"),
        ({"failure_code": "E-\x01"}, "failure_code must be 1 to 64 printable characters"),
    ],
)
def test_the_run_lists_new_filters_refuse_bad_values_with_a_400_page(
    client, project, query, message
):
    login(client, project["project_id"], project["api_token"])

    response = client.get("/console/runs", query_string=query)

    assert response.status_code == 400
    assert message in text(response) and "Traceback" not in text(response)


def test_the_overview_takes_no_query_parameters(client, project):
    login(client, project["project_id"], project["api_token"])

    response = client.get("/console/", query_string={"hours": "24"})

    assert response.status_code == 400
    assert "unknown query parameter" in text(response)


@pytest.fixture
def long_history(engine, project):
    """20,000 runs finished two days ago and 20,000 sent messages, analysed: enough for the
    planner to prefer an index over reading the tables whole, as with a real history."""
    pid = project["project_id"]
    finished = seed.runs(engine, pid, "COMPLETED", 20_000, finished_ago=2 * 24 * 60)
    seed.runs(engine, pid, "PENDING", 3)
    seed.runs(engine, pid, "WAITING_APPROVAL", 2, saga_status="MANUAL_INTERVENTION")
    with engine.begin() as conn:
        conn.execute(
            sql(
                """
INSERT INTO awooop_outbox (project_id, run_id, channel, purpose, payload, status)
SELECT :p, :r, 'webhook', 'run_outcome', '{}', 'SENT' FROM generate_series(1, 20000)
"""
            ),
            {"p": pid, "r": finished[0][0]},
        )
    seed.outbox(engine, pid, finished[1][0], "PARKED", 2)
    with engine.connect() as conn:
        conn.execute(sql("ANALYZE awooop_run_state"))
        conn.execute(sql("ANALYZE awooop_outbox"))
    return pid


# The outbox statements may read any partial index of unsent or done messages: each holds
# only PENDING, PARKED (or SENT, by status first) rows, so its size is the backlog, not the
# history; with the retention sweep's (status, created_at) index the planner may prefer it.
OUTBOX_INDEXES = (
    "ix_awooop_outbox_project_unsent",
    "ix_awooop_outbox_due",
    "ix_awooop_outbox_done",
)

STATEMENTS = {
    "finished": (store_overview._FINISHED, "ix_awooop_run_state_project_finished"),
    "active": (store_overview._ACTIVE, "ix_awooop_run_state_project_status"),
    "interventions": (store_overview._INTERVENTIONS, "ix_awooop_run_state_intervention"),
    "oldest": (store_overview._OLDEST_INTERVENTION, "ix_awooop_run_state_intervention"),
    "outbox": (store_overview._OUTBOX_COUNTS, OUTBOX_INDEXES),
    "outbox oldest": (store_overview._OUTBOX_OLDEST, OUTBOX_INDEXES),
    "runs with parked messages": (queries._LIST_RUNS_WITH_OUTBOX, OUTBOX_INDEXES),
    "runs finished in a minute": (queries._LIST_RUNS, "ix_awooop_run_state_project_finished"),
    "completed in the window": (queries._LIST_RUNS, "ix_awooop_run_state_project_finished"),
}


def test_the_overviews_statements_read_a_long_history_through_their_indexes(engine, long_history):
    params = {
        "project_id": long_history,
        "minutes": 180,
        "cap": 10_000,
        "statuses": None,
        "saga_statuses": None,
        "workflow": None,
        "channel": None,
        "created_from": None,
        "created_until": None,
        "finished_from": None,
        "finished_until": None,
        "failure_code": None,
        "provider_event_id": None,
        "idempotency_key": None,
        "tags": None,
        "outbox": "PARKED",
        "after_created_at": None,
        "after_run_id": None,
        "limit": 51,
    }
    wrong = {}
    with engine.connect() as conn:
        start = conn.execute(sql("SELECT date_trunc('minute', now())")).scalar_one()
        for name, (statement, index) in STATEMENTS.items():
            if name == "runs finished in a minute":  # a bar's link
                params |= {
                    "statuses": ["COMPLETED"],
                    "finished_from": start,
                    "finished_until": start + timedelta(minutes=1),
                }
            if name == "completed in the window":  # a status's link
                params |= {
                    "statuses": ["COMPLETED"],
                    "finished_from": start - timedelta(minutes=179),
                    "finished_until": None,
                }
            plan = "\n".join(conn.execute(sql("EXPLAIN " + statement.text), params).scalars())
            wanted = (index,) if isinstance(index, str) else index
            if not any(i in plan for i in wanted) or "Seq Scan on awooop_" in plan:
                wrong[name] = plan
    assert wrong == {}
