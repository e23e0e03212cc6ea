"""A worker whose database is down takes no run work from one that reaches it — real
processes.

Celery hands a worker's pool process the next message as soon as its task returns. A worker
whose claims fail at once (PostgreSQL refuses it) would take every message it could and drop
each one. Here such a worker takes one message, sends it back on the queue, and, its only pool
process waiting for the database, takes no other: the worker that reaches PostgreSQL runs
everything, with no sweep running to send anything again.
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy.engine import make_url

from awooop.tasks import runs as run_tasks
from tests.support import db
from tests.support import runs as test_runs
from tests.support.netproxy import FaultProxy
from tests.support.processes import Stack, wait_until

pytestmark = pytest.mark.slow

RUNS = 20


def messages_taken(log: str) -> int:
    return len(re.findall(r"Task awooop\.runs\.execute\[[0-9a-f-]+\] received", log))


@pytest.mark.timeout(180)
def test_a_worker_whose_database_is_down_takes_one_message_and_gives_it_back(
    stack: Stack, settings, engine, project
):
    url = make_url(settings.database_url)
    with FaultProxy(url.host or "127.0.0.1", url.port or 5432, name="down-db") as proxy:
        # Given a worker whose database then refuses it (every connection reset), and no beat
        # or maintenance worker: nothing but the workers sends a message again
        through_proxy = url.set(host="127.0.0.1", port=proxy.port)
        cut = stack.worker(
            "worker-down",
            env={"AWOOOP_DATABASE_URL": through_proxy.render_as_string(hide_password=False)},
        )
        proxy.drop()

        # When runs are sent while it is the only worker
        run_ids = test_runs.admit_many(engine, project["project_id"], RUNS)
        run_tasks.enqueue(run_ids)
        wait_until(lambda: messages_taken(cut.log()) >= 1, 30, "worker-down to take a message")
        # and then a worker that reaches PostgreSQL starts
        stack.worker("worker-up")

        # Then that worker completes every run, each claimed once
        wait_until(
            lambda: db.count(engine, "awooop_run_state", "status = 'COMPLETED'") == RUNS,
            60,
            "every run completed",
        )
        taken_by_cut = messages_taken(cut.log())
        # Its pool process still waits for the database, and a warm shutdown would wait for
        # it (at most AWOOOP_WORKER_DEAD_AFTER_SECONDS): the test does not.
        cut.kill()

    claims = db.count(engine, "awooop_run_event", "kind = 'lease' AND trigger_id LIKE 'claim:%'")
    assert claims == RUNS
    # And the worker whose database is down took one message, the one it gave back
    assert taken_by_cut == 1, f"the worker whose database is down took {taken_by_cut} messages"
    assert cut.log().count('"claim_unreachable"') == 1
