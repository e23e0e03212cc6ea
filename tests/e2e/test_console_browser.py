"""The ops console in a real browser: headless Debian chromium driven by Playwright, against
real gunicorn, Celery worker, maintenance worker and beat processes.

Chromium comes from Debian (``make browser`` installs it; ``make test`` never installs
anything, CI asks for it) and Playwright drives it through ``executable_path``, so no browser is
downloaded. Without either, the test skips locally, saying how to get it, and fails under
``CI=true``. With ``AWOOOP_SCREENSHOTS=1`` it saves the
pages it visits to ``docs/screenshots/``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from awooop.tasks import runs as run_tasks
from tests.conftest import IN_CI
from tests.support import db
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

    # When an operator signs in...
    page.goto(f"{base}/console/")
    assert page.url.startswith(f"{base}/console/login")
    page.get_by_label("Project id").fill(pid)
    page.get_by_label("API token").fill(project["api_token"])
    page.get_by_role("button", name="Sign in").click()
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
