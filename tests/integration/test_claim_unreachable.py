"""A worker process whose database does not answer its claim: the run's message goes back on
the queue at once, for a worker that can reach the database, and the process takes no other
message until its database answers again.

Before, the claim's error ended the task and Celery acknowledged the message: a worker cut
from PostgreSQL took run messages faster than a healthy one (each failed within the connect
timeout) and dropped them, and each waited for the orphan sweep — which sent it again, to the
same worker (the chaos partition scenario caught a run starved that way for a minute).
"""

from __future__ import annotations

import dataclasses
import threading
import time

from sqlalchemy import text
from sqlalchemy.engine import make_url

from awooop import db
from awooop.engine import runner
from awooop.tasks import runs
from tests.integration.conftest import queued_run_ids
from tests.support import runs as test_runs
from tests.support.netproxy import FaultProxy
from tests.support.processes import free_port
from tests.support.waiting import until


def run_row(engine, run_id):
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT status, worker_id, lease_epoch FROM awooop_run_state WHERE run_id = :r"),
            {"r": run_id},
        ).one()


def test_a_claim_the_database_does_not_answer_sends_the_run_again_and_waits_for_it(
    engine, database_url, project, settings, redis_client
):
    # Given a run waiting to be claimed, and a worker process whose link to PostgreSQL stops
    # forwarding (a partition: no error, no reset; new connections are never answered)
    run_id = test_runs.admit(engine, project["project_id"])
    quick = dataclasses.replace(settings, worker_liveness_interval_seconds=0.2)
    url = make_url(database_url)
    with FaultProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = db.make_engine(
            url.set(host="127.0.0.1", port=proxy.port), role=db.WORKER, settings=quick
        )
        proxy.partition()
        outcome: list[str] = []
        took = threading.Thread(
            target=lambda: outcome.append(runs.handle(proxied, quick, str(run_id))),
            name="pool-process",
        )
        started = time.monotonic()

        # When its pool process takes the run's message
        took.start()

        # Then the message goes back on the queue at once, naming the run
        until(lambda: queued_run_ids(redis_client) == [str(run_id)], 15, "the message back")
        # And the process keeps asking its database, taking nothing else meanwhile
        asked = proxy.accepted
        until(lambda: proxy.accepted > asked, 10, "the process to ask its database again")
        still_waiting = took.is_alive()

        # And once the database answers again, it goes back to work
        proxy.heal()
        healed = time.monotonic()
        took.join(timeout=15)
        returned = time.monotonic()
        proxied.dispose()

    assert still_waiting, "the process went back to taking messages while cut off"
    assert not took.is_alive()
    assert outcome == [runner.Outcome.UNREACHABLE.value]
    assert returned - healed < 10
    assert returned - started < quick.worker_dead_after_seconds + 15
    # The run itself was never claimed: the worker that takes the message claims it.
    assert tuple(run_row(engine, run_id)) == ("PENDING", None, 0)
    assert runner.execute(engine, settings, run_id) is runner.Outcome.COMPLETED


def test_the_wait_ends_after_dead_after_when_the_database_stays_away(
    engine, database_url, project, settings, redis_client
):
    # Given a worker process whose database refuses every connection (it is down)
    run_id = test_runs.admit(engine, project["project_id"])
    brief = dataclasses.replace(
        settings, worker_liveness_interval_seconds=0.2, worker_dead_after_seconds=1.0
    )
    down = db.make_engine(
        make_url(database_url).set(host="127.0.0.1", port=free_port()),
        role=db.WORKER,
        settings=brief,
    )

    # When its pool process takes the run's message
    started = time.monotonic()
    outcome = runs.handle(down, brief, str(run_id))
    took = time.monotonic() - started
    down.dispose()

    # Then it gives the message back, keeps asking for dead_after, and returns (a warm
    # shutdown is not held longer than that, nor is the process kept from new work for good)
    assert outcome == runner.Outcome.UNREACHABLE.value
    assert queued_run_ids(redis_client) == [str(run_id)]
    assert tuple(run_row(engine, run_id)) == ("PENDING", None, 0)
    assert brief.worker_dead_after_seconds <= took < brief.worker_dead_after_seconds + 3
