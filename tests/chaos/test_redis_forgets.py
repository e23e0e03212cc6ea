"""Scenario 4 — Redis forgets.

2,000 runs of ``chaos-saga`` are delivered over HTTP by provider-like clients (retries on
5xx / connection errors; 5 % with a 1.5 s step, 5 % rejected): 1,800 at 20 a second with 10 %
exact redeliveries, and two bursts of 100 as fast as the web takes them, each just before a
FLUSHALL so that the runs queue holds messages then (at 20/s the workers keep it empty). The
broker loses everything three times: ``FLUSHALL`` at a quarter of the steady delivery window,
``kill -9`` of redis-server at half (restarted on the same port, empty, 3 s later) and
``FLUSHALL`` again at three quarters. Queued run messages, the workers' unacked messages,
beat's sweep messages and kombu's bindings are lost each time.

PostgreSQL holds every admitted run: admission commits the run before it sends the message and
answers 202 even when the send fails; the orphan sweep (beat → maintenance worker) re-sends
the message of a claimable run nobody claimed for ``AWOOOP_ORPHAN_AFTER_SECONDS``.

Asserted, from PostgreSQL and the recorder:
- every event has exactly one run and every redelivery was answered with it; no 5xx (the
  broker is not on admission's path: a failed send is logged, the run is committed);
- every run terminal within a bound after the end of delivery (the last fault is earlier);
  the recovery time, last fault → all terminal, is reported;
- none executed twice: no step SUCCEEDED twice in any journal, and the recorder saw each
  effect id once (no process dies here, so no handler has a reason to run twice);
- every effect a journal shows SUCCEEDED was recorded, and none for a run that does not exist.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis

from tests.chaos import checks
from tests.chaos.providers import api_event
from tests.chaos.report import scaled
from tests.chaos.stack import TIMINGS

RUNS = scaled(2000, least=100)
# Just before each FLUSHALL a burst of events arrives as fast as the web takes them, so that
# the runs queue holds messages the flush throws away (at 20/s the workers keep it empty).
BURST = scaled(100, least=20)
ADMISSION_RATE = 20.0
STEADY = RUNS - BURST * 2
WINDOW = STEADY / ADMISSION_RATE
# The faults, as shares of the delivery window: the last one is a FLUSHALL, which (unlike a
# restart) drops no client connection — nothing reconnects and re-declares anything.
FAULTS = ((0.25, "flushall"), (0.5, "kill"), (0.75, "flushall"))
REDIS_DOWN_S = 3.0
ORPHAN_AFTER = float(TIMINGS["AWOOOP_ORPHAN_AFTER_SECONDS"])
ORPHAN_INTERVAL = float(TIMINGS["AWOOOP_ORPHAN_INTERVAL_SECONDS"])
# After the last delivery: the orphan sweep's delay and interval, plus the time two workers
# need for what is still queued, with room for a contended machine.
BOUND_AFTER_DELIVERY = ORPHAN_AFTER + ORPHAN_INTERVAL + 60


def _queued(url: str) -> dict[str, int]:
    """Messages waiting per queue (what a FLUSHALL throws away), -1 if Redis is down."""
    client = redis.Redis.from_url(url, socket_timeout=2)
    try:
        return {q: int(client.llen(q)) for q in ("runs", "maintenance")}
    except redis.RedisError:
        return {"runs": -1, "maintenance": -1}
    finally:
        client.close()


@pytest.mark.timeout(900)
def test_redis_flushes_and_a_redis_kill_lose_no_run_and_repeat_none(
    chaos_stack, chaos_services, figures
):
    figures.scenario("4", "Redis forgets (FLUSHALL twice, kill -9 and restart once)")
    stack = chaos_stack.start()
    # Run as a deployment runs workers: under a supervisor. A Celery worker that loses Redis
    # while it holds an unacked message can die in kombu's reconnect ("Unrecoverable error:
    # AttributeError ... 'hostname'" from restore_unacked on a closed connection), seen at a
    # fifth of this scenario's size; the revivals are reported.
    stack.supervise()
    broker = chaos_services.redis

    deliveries = []
    for i in range(RUNS):
        payload: dict = {"n": i}
        if i % 20 == 7:
            payload["slow"] = 1.5
        if i % 20 == 13:
            payload["reject"] = True
        deliveries.append(api_event(stack.project, stack.new_key("forget"), payload))

    bursts = [deliveries[STEADY + i * BURST : STEADY + (i + 1) * BURST] for i in range(2)]
    steady = deliveries[:STEADY]
    burster = stack.provider(threads=8, redelivery_share=0, seed=4)
    faults: list[dict] = []
    last_fault = [0.0]
    not_terminal_at_last_fault = [0]

    def inject() -> None:
        started = time.monotonic()
        for share, kind in FAULTS:
            time.sleep(max(0.0, started + share * WINDOW - time.monotonic()))
            fault: dict = {"kind": kind, "at_s": round(time.monotonic() - started, 1)}
            if kind == "flushall":
                burst = bursts.pop()
                burster.deliver_all(burst)
                fault["queued_before"] = _queued(broker.url)
                broker.flushall()
            else:
                fault["queued_before"] = _queued(broker.url)
                broker.kill()
                time.sleep(REDIS_DOWN_S)
                broker.start()
                fault["down_s"] = round(time.monotonic() - started - fault["at_s"], 1)
            faults.append(fault)
            last_fault[0] = time.monotonic()
        not_terminal_at_last_fault[0] = len(checks.not_terminal(stack.engine))

    injector = threading.Thread(target=inject, name="redis-faults")
    provider = stack.provider(threads=8, redelivery_share=0.1, rate=ADMISSION_RATE)
    started = time.monotonic()
    injector.start()
    provider.deliver_all(steady)
    delivered_at = time.monotonic()
    injector.join(timeout=WINDOW + 60)
    assert not injector.is_alive()

    try:
        checks.wait_terminal(stack.engine, None, BOUND_AFTER_DELIVERY)
    finally:
        all_terminal_at = time.monotonic()
        counts = checks.status_counts(stack.engine)
        figures.update(
            {
                "runs": RUNS,
                "faults": "; ".join(
                    f"{f['kind']} at {f['at_s']} s (queued runs {f['queued_before']['runs']},"
                    f" maintenance {f['queued_before']['maintenance']}"
                    + (f", down {f['down_s']} s)" if "down_s" in f else ")")
                    for f in faults
                ),
                "delivery_window_s": round(delivered_at - started, 1),
                "runs_not_terminal_at_last_fault": not_terminal_at_last_fault[0],
                "recovery_last_fault_to_all_terminal_s": round(all_terminal_at - last_fault[0], 1),
                "waited_after_delivery_s": round(all_terminal_at - delivered_at, 1),
                "bound_after_delivery_s": BOUND_AFTER_DELIVERY,
                "orphan_messages_resent": sum(
                    int(a.get("count", 0))
                    for a in stack.workers["maintenance"].actions("orphans_resent")
                ),
                "runs_by_status": counts,
                "worker_restarts_by_the_supervisor": stack.revivals,
                "claims_per_run": checks.attempts_histogram(stack.engine),
                **provider.figures(),
                "burst_http_answers": dict(sorted(burster.answers.items())),
            }
        )

    run_ids = {d.run_id for d in deliveries}
    doubles = checks.double_completions(stack.engine)
    effects = checks.effects(stack.engine, stack.recorder)
    figures.update(
        {
            "scenario_s": round(time.monotonic() - started, 1),
            "steps_completed_twice": len(doubles),
            **effects.figures,
        }
    )

    # Exactly one run per event; redeliveries answered with it; admission never failed.
    assert len(run_ids) == RUNS and None not in run_ids
    assert checks.rows(stack.engine, "SELECT count(*) AS n FROM awooop_run_state")[0]["n"] == RUNS
    assert provider.redelivery_mismatches == []
    for client in (provider, burster):
        assert client.gave_up == []
        assert sum(n for s, n in client.answers.items() if s >= 500) == 0
    # Every run ended the way its event asked.
    rejected = sum(b"reject" in d.body for d in deliveries)
    assert counts == {"COMPLETED/COMPLETED": RUNS - rejected, "FAILED/COMPENSATED": rejected}
    # None executed twice.
    assert doubles == []
    assert effects.repeated == {}
    assert effects.missing == []
    assert effects.unknown == []
    # The flushes did throw queued run messages away (the sweep had something to re-send).
    assert sum(f["queued_before"]["runs"] for f in faults if f["kind"] == "flushall") > 0
