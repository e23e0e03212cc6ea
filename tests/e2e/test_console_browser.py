"""The ops console in a real browser: headless Debian chromium driven by Playwright, against
real gunicorn, Celery worker, maintenance worker and beat processes.

Chromium comes from Debian (``make browser`` installs it; ``make test`` never installs
anything, CI asks for it) and Playwright drives it through ``executable_path``, so no browser is
downloaded. Without either, the test skips locally, saying how to get it, and fails under
``CI=true``. With ``AWOOOP_SCREENSHOTS=1`` it saves the
pages it visits to ``docs/screenshots/``.
"""

from __future__ import annotations

import math
import os
import random
import uuid
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from awooop.tasks import runs as run_tasks
from tests.conftest import IN_CI
from tests.support import db
from tests.support import overview as seed
from tests.support import runs as test_runs
from tests.support.processes import ROOT, wait_until

pytestmark = pytest.mark.slow

CHROMIUM = Path(os.environ.get("AWOOOP_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = ROOT / "docs" / "screenshots"


def _require_browser() -> None:
    problems = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append("the playwright package is not installed (make install)")
    if not CHROMIUM.exists():
        problems.append(
            f"no chromium at {CHROMIUM}: install Debian's with `make browser` (apt-get install "
            "chromium, as root) or `sudo apt-get install chromium`, or set AWOOOP_CHROMIUM to "
            "a chromium binary"
        )
    if problems:
        message = "the console's browser test cannot run: " + "; ".join(problems)
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def page() -> Iterator[Any]:
    """A fresh headless chromium page (its own cookies)."""
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        context = browser.new_context(viewport={"width": 1360, "height": 860})
        context.set_default_timeout(15_000)
        yield context.new_page()
        context.close()
        browser.close()


def screenshot(page: Any, name: str) -> None:
    if os.environ.get("AWOOOP_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def sign_in(page: Any, base: str, project: dict) -> None:
    """Open the console, be sent to sign in, sign in: the overview is the first page."""
    page.goto(f"{base}/console/")
    assert page.url.startswith(f"{base}/console/login")
    page.get_by_label("Project id").fill(project["project_id"])
    page.get_by_label("API token").fill(project["api_token"])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()


def run_state(engine, run_id) -> tuple[str, str]:
    row = db.run(engine, run_id)
    return row["status"], row["saga_status"]


def test_an_operator_retries_a_stuck_run_in_the_browser_and_sees_it_complete(
    page, stack, engine, project, tmp_path
):
    # Given real processes, a few finished runs, and a run halted for a person
    stack.worker("worker", queues="runs,notifications")
    stack.worker("maintenance", queues="maintenance")
    stack.beat()
    _, base = stack.web()
    pid = project["project_id"]
    others = [
        test_runs.admit(engine, pid, "noop-3"),
        test_runs.admit(engine, pid, "test-saga"),
        test_runs.admit(engine, pid, "test-approval"),
        test_runs.admit(engine, pid, "noop-3"),
    ]
    stuck = test_runs.admit(engine, pid, "test-halt-once", {"marker": str(tmp_path / "halted")})
    run_tasks.enqueue([*others, stuck])
    wait_until(
        lambda: run_state(engine, stuck) == ("WAITING_APPROVAL", "MANUAL_INTERVENTION"),
        40,
        "the run to stop for a person",
    )
    wait_until(
        lambda: all(db.run(engine, r)["status"] != "PENDING" for r in others),
        40,
        "the other runs to be worked on",
    )
    short = str(stuck)[:8]

    # When an operator signs in, the overview shows the stuck run at the head of the queue...
    sign_in(page, base, project)
    queue = page.locator("section.overview-queue")
    assert queue.locator("[data-count]").inner_text() == "1"
    assert queue.get_by_role("link", name=short).is_visible()
    page.get_by_role("navigation").get_by_role("link", name="Runs").click()
    page.get_by_role("heading", name="Runs").wait_for()
    assert page.locator("table.list tbody tr").count() == 5
    screenshot(page, "console-runs")

    # ...opens the stuck run from the intervention queue...
    page.get_by_role("link", name="Intervention queue").click()
    page.get_by_role("heading", name="Intervention queue").wait_for()
    row = page.locator("table.list tbody tr", has_text=short)
    assert "step check halted" in row.inner_text()
    screenshot(page, "console-interventions")
    row.get_by_role("link", name="Open").click()
    page.get_by_role("heading", name=f"Run {stuck}").wait_for()
    assert page.locator(".states .badge").all_inner_texts() == [
        "WAITING_APPROVAL",
        "MANUAL_INTERVENTION",
    ]

    # ...clicks retry, gives a reason and confirms
    page.get_by_role("link", name="Retry resolution…").click()
    page.get_by_role("heading", name=f"Retry resolution run {short}?").wait_for()
    screenshot(page, "console-confirm")
    page.get_by_label("Reason (recorded in the audit trail)").fill("disk checked by hand")
    page.get_by_role("button", name="Confirm: Retry resolution").click()
    page.get_by_text("Retry resolution: done.").wait_for()

    # Then reloading the run page shows it completed
    def completed_on_the_page() -> bool:
        page.reload()
        return page.locator(".states .badge").all_inner_texts() == ["COMPLETED", "COMPLETED"]

    wait_until(completed_on_the_page, 40, "the run page to show COMPLETED", interval=0.5)
    timeline = page.locator("ol.timeline").inner_text().lower()
    assert "reset" in timeline and "after" in timeline
    audit = page.locator("table.audit").inner_text()
    assert "management" in audit and "disk checked by hand" in audit
    screenshot(page, "console-run-detail")

    # and the database agrees: one operator action, by the operator's credential
    assert run_state(engine, stuck) == ("COMPLETED", "COMPLETED")
    (action,) = [e for e in db.events(engine, stuck) if e["trigger"] == "operator"]
    assert action["actor"].startswith("api-token:")
    assert action["detail"] == {"operation": "retry_resolution", "reason": "disk checked by hand"}
    assert uuid.UUID(action["actor"].removeprefix("api-token:"))


def three_hours_of_history(engine, project_id: str) -> dict[str, list]:
    """Runs finished over the last three hours — a steady flow of completions, a burst of
    expired approvals, scattered retries given up — and some unfinished ones now."""
    rnd = random.Random(7)
    finished: dict[str, list] = {}
    for ago in range(1, 176):  # a margin: the window moves on if a minute passes meanwhile
        flow = int(6 + 4 * math.sin(ago / 17) + rnd.random() * 3)
        finished.setdefault("COMPLETED", []).extend(
            seed.runs(engine, project_id, "COMPLETED", flow, finished_ago=ago)
        )
        if rnd.random() < 0.18:
            finished.setdefault("E-STEP-002", []).extend(
                seed.runs(
                    engine, project_id, "FAILED", 1, finished_ago=ago, failure_code="E-STEP-002"
                )
            )
        if 40 < ago < 55:
            finished.setdefault("E-APPROVAL-002", []).extend(
                seed.runs(
                    engine,
                    project_id,
                    "FAILED",
                    rnd.randint(2, 5),
                    finished_ago=ago,
                    failure_code="E-APPROVAL-002",
                )
            )
        if rnd.random() < 0.05:
            finished.setdefault("CANCELLED", []).extend(
                seed.runs(engine, project_id, "CANCELLED", 1, finished_ago=ago)
            )
    seed.runs(engine, project_id, "PENDING", 7)
    seed.runs(engine, project_id, "RUNNING", 4)
    seed.runs(engine, project_id, "WAITING_APPROVAL", 3)
    (stuck,) = seed.runs(
        engine,
        project_id,
        "WAITING_APPROVAL",
        saga_status="MANUAL_INTERVENTION",
        waiting_minutes=47,
        workflow="alert-triage",
        current_step="remediate",
        failure_reason="step remediate: outcome unknown after 3 resolver polls",
    )
    seed.outbox(engine, project_id, stuck[0], "PENDING", 2)
    seed.outbox(engine, project_id, stuck[0], "PARKED", 1)
    return finished


def test_the_overview_draws_its_chart_under_the_csp_and_each_bar_opens_its_runs(
    page, stack, engine, project
):
    # Given three hours of finished runs and a web process (no worker: nothing moves)
    finished = three_hours_of_history(engine, project["project_id"])
    _, base = stack.web()
    refused: list[str] = []
    page.on(
        "console",
        lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None,
    )

    # When an operator signs in
    sign_in(page, base, project)

    # Then the numbers are the seeded ones...
    stats = {
        a.get_attribute("data-status"): a.locator(".stat-n").inner_text()
        for a in page.locator("a.stat").all()
    }
    assert stats == {
        "PENDING": "7",
        "RUNNING": "4",
        "WAITING_TOOL": "0",
        "WAITING_APPROVAL": "4",
        "RESUMED": "0",
        "COMPLETED": f"{len(finished['COMPLETED']):,}",
        "FAILED": str(len(finished["E-STEP-002"]) + len(finished["E-APPROVAL-002"])),
        "CANCELLED": str(len(finished["CANCELLED"])),
    }
    # ...the chart is drawn: bars with their colours from the stylesheet (the CSP lets no
    # inline style or script in, and the browser reported no refusal)
    bars = page.locator("svg.chart g.bar")
    minutes = {r[1].astimezone(UTC).strftime("%H:%M") for r in finished["COMPLETED"]}
    assert bars.count() == len(minutes)
    legend = page.locator("ul.legend li", has_text="E-APPROVAL-002").locator("rect")
    css = legend.get_attribute("class")
    burst = page.locator(f"svg.chart rect.{css}").first
    box = burst.bounding_box()
    assert box is not None and box["height"] > 0 and box["width"] > 0
    fill = burst.evaluate("e => getComputedStyle(e).fill")
    assert fill == legend.evaluate("e => getComputedStyle(e).fill") != "rgb(0, 0, 0)"
    assert refused == []
    screenshot(page, "console-overview")

    # When the operator clicks the burst's first bar segment
    minute = burst.evaluate("e => e.closest('g.bar').dataset.minute")
    count = int(burst.get_attribute("data-count") or 0)
    burst.click()
    page.get_by_role("heading", name="Runs").wait_for()

    # Then the run list shows exactly that minute's expired approvals
    rows = page.locator("table.list tbody tr")
    assert rows.count() == count
    expected = {
        str(run_id)[:8]
        for run_id, at in finished["E-APPROVAL-002"]
        if at.astimezone(UTC).strftime("%H:%M") == minute
    }
    assert {r.locator("td").nth(1).inner_text() for r in rows.all()} == expected
    assert {r.locator("td").nth(9).inner_text() for r in rows.all()} == {"E-APPROVAL-002"}


def test_an_operator_approves_a_run_and_bulk_cancels_the_waiting_ones_in_the_browser(
    page, stack, engine, project
):
    # Given real processes and four runs waiting for an approval
    stack.worker("worker", queues="runs,notifications")
    _, base = stack.web()
    pid = project["project_id"]
    waiting = [test_runs.admit(engine, pid, "test-approval") for _ in range(4)]
    run_tasks.enqueue(waiting)
    wait_until(
        lambda: all(run_state(engine, r) == ("WAITING_APPROVAL", "RUNNING") for r in waiting),
        40,
        "the runs to wait for an approval",
    )
    approved, rest = waiting[0], waiting[1:]
    short = str(approved)[:8]

    # When an operator approves one from the approvals list, with a comment
    sign_in(page, base, project)
    page.get_by_role("navigation").get_by_role("link", name="Approvals").click()
    page.get_by_role("heading", name="Approvals").wait_for()
    assert page.locator("table.list tbody tr").count() == 4
    row = page.locator("table.list tbody tr", has_text=short)
    row.get_by_label("Comment").fill("change window open")
    screenshot(page, "console-approvals")
    row.get_by_role("button", name="Approve").click()
    page.get_by_text(f"Approved: restart-db on run {short}").wait_for()

    # Then the run goes on to completion, approved by the operator's credential via console
    wait_until(lambda: run_state(engine, approved)[0] == "COMPLETED", 40, "the approved run")
    (approval,) = db.rows(engine, "SELECT * FROM awooop_approval WHERE run_id = :r", r=approved)
    assert (approval["status"], approval["decided_via"]) == ("APPROVED", "console")
    assert approval["comment"] == "change window open"

    # When the operator filters the runs still waiting and cancels them all
    page.get_by_role("navigation").get_by_role("link", name="Runs").click()
    page.locator("form.filters select[name=status]").select_option("WAITING_APPROVAL")
    page.get_by_role("button", name="Filter").click()
    page.get_by_role("link", name="Cancel all…").click()

    # a confirmation shows the filter and the exact count first
    page.get_by_role("heading", name="Cancel 3 runs?").wait_for()
    assert page.locator("strong.bulk-count").inner_text() == "3"
    assert "status=WAITING_APPROVAL" in page.locator("dl.filters-shown").inner_text()
    screenshot(page, "console-bulk-confirm")
    page.get_by_label("Reason (recorded in each run's audit trail)").fill("bad deploy")
    page.get_by_role("button", name="Confirm: Cancel 3 runs").click()
    page.get_by_text("Cancel: 3 of 3 matching runs acted upon; 0 skipped").wait_for()

    # Then each of them is compensated and cancelled, with its own audit row
    wait_until(
        lambda: all(run_state(engine, r)[0] == "CANCELLED" for r in rest),
        40,
        "the cancelled runs to be compensated",
    )
    for run_id in rest:
        (action,) = [e for e in db.events(engine, run_id) if e["trigger"] == "operator"]
        assert action["detail"] == {"operation": "cancel", "reason": "bad deploy"}
    assert run_state(engine, approved)[0] == "COMPLETED"
