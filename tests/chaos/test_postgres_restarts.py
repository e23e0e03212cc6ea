"""Scenario 3 — PostgreSQL restarts.

Gitea webhook deliveries of 4,200 distinct events arrive at 14 a second, 20 % of them
delivered twice (about 5,000 deliveries; 5 % with a 1.5 s step, 5 %
rejected), from a provider-like client that retries a 5xx or a connection error with
back-off. Meanwhile the suite's PostgreSQL is restarted with ``pg_ctl restart -m fast`` or
``-m immediate`` (both modes, alternately, from a random first one) at random intervals of 5
to 40 s, as long as deliveries last: about five minutes, the rate two workers of two prefork
children sustain on this 2-core machine (``AWOOOP_CHAOS_SCALE`` scales it).

Nothing restarts the application: no supervisor, the stack's processes keep their pids.

Asserted, from PostgreSQL, the provider's answers and /proc:
- every distinct event has exactly one run (runs counted per event key in the database) and
  every redelivery was answered with it; no delivery given up;
- the only 5xx answer is 503 with ``Retry-After``; no connection dropped;
- every run terminal within lease + reaper + orphan sweep + 30 s of the later of the last
  restart and the last delivery; rejected runs compensated, the others completed;
- no step SUCCEEDED twice in any journal; every journal effect recorded, none unknown;
- web, workers, maintenance worker and beat are the processes started at the beginning
  (parents and their children: same pids, alive), and after the storm both run workers
  complete steps of new runs admitted by the same web server.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from tests.chaos import checks
from tests.chaos.providers import gitea_event
from tests.chaos.report import scaled
from tests.chaos.stack import LEASE_TTL, REAPER_INTERVAL, TIMINGS, ChaosStack, children_of

EVENTS = scaled(4200, least=100)
REDELIVERY_SHARE = 0.2
ADMISSION_RATE = 14.0
WINDOW = EVENTS / ADMISSION_RATE
INTERVAL = (5.0, 40.0)
ORPHAN = float(TIMINGS["AWOOOP_ORPHAN_AFTER_SECONDS"]) + float(
    TIMINGS["AWOOOP_ORPHAN_INTERVAL_SECONDS"]
)
BOUND_AFTER_LAST_FAULT = LEASE_TTL + REAPER_INTERVAL + ORPHAN + 30
NEW_RUNS = 24


def _processes(stack: ChaosStack) -> dict[str, set[int]]:
    """Every application process: name → {parent pid, its live children}."""
    found = {}
    for process in stack.processes:
        if process.popen.poll() is None:
            pid = process.popen.pid
            found[process.name] = {pid, *children_of(pid)}
        else:
            found[process.name] = set()
    return found


@pytest.mark.timeout(900)
def test_postgres_restarts_lose_nothing_and_need_no_process_restart(
    chaos_stack, chaos_services, figures
):
    figures.scenario("3", "PostgreSQL restarts (pg_ctl restart -m fast / -m immediate)")
    stack = chaos_stack.start()
    postgres = chaos_services.postgres
    rng = random.Random(3)
    processes_before = _processes(stack)

    deliveries = []
    for i in range(EVENTS):
        payload: dict = {"n": i, "ref": "refs/heads/main"}
        if i % 20 == 7:
            payload["slow"] = 1.5
        if i % 20 == 13:
            payload["reject"] = True
        deliveries.append(gitea_event(stack.project, stack.new_key("gitea"), payload))

    restarts: list[dict] = []
    first_mode = rng.choice(["fast", "immediate"])
    modes = [first_mode, "immediate" if first_mode == "fast" else "fast"]
    stop = threading.Event()
    last_restart = [0.0]

    def storm() -> None:
        started = time.monotonic()
        while not stop.is_set():
            wait = rng.uniform(*INTERVAL)
            # The last restart is followed by deliveries: recovery is measured under load.
            if time.monotonic() - started + wait > WINDOW - 2:
                return
            if stop.wait(wait):
                return
            mode = modes[len(restarts) % 2]
            at = time.monotonic() - started
            down = postgres.restart(mode)
            restarts.append({"mode": mode, "at_s": round(at, 1), "down_s": round(down, 1)})
            last_restart[0] = time.monotonic()

    storm_thread = threading.Thread(target=storm, name="pg-restarts")
    provider = stack.provider(
        threads=8, redelivery_share=REDELIVERY_SHARE, rate=ADMISSION_RATE, max_attempts=12
    )
    started = time.monotonic()
    storm_thread.start()
    try:
        provider.deliver_all(deliveries)
    finally:
        stop.set()
        storm_thread.join(timeout=120)
    delivered_at = time.monotonic()
    assert not storm_thread.is_alive()
    # This process's own pooled connections died with the server: read on fresh ones.
    stack.engine.dispose()

    try:
        checks.wait_terminal(stack.engine, None, BOUND_AFTER_LAST_FAULT)
    finally:
        terminal_at = time.monotonic()
        reference = max(last_restart[0], delivered_at)
        figures.update(
            {
                "events": EVENTS,
                "deliveries": sum(1 + d.redelivered for d in deliveries),
                "restarts": len(restarts),
                "restarts_by_mode": {
                    m: sum(r["mode"] == m for r in restarts) for m in ("fast", "immediate")
                },
                "restart_moments_s": ", ".join(f"{r['at_s']} ({r['mode']})" for r in restarts),
                "database_down_s_max": max((r["down_s"] for r in restarts), default=0.0),
                "database_down_s_total": round(sum(r["down_s"] for r in restarts), 1),
                "delivery_window_s": round(delivered_at - started, 1),
                "last_restart_before_last_delivery_s": round(delivered_at - last_restart[0], 1)
                if restarts
                else None,
                "all_terminal_after_last_restart_s": round(terminal_at - last_restart[0], 1)
                if restarts
                else None,
                "all_terminal_after_last_delivery_s": round(terminal_at - delivered_at, 1),
                "bound_after_last_fault_s": BOUND_AFTER_LAST_FAULT,
                "within_bound": terminal_at - reference <= BOUND_AFTER_LAST_FAULT + 1,
                **provider.figures(),
                "http_5xx_not_503": sum(
                    n for s, n in provider.answers.items() if s >= 500 and s != 503
                ),
            }
        )

    # The processes: nothing was restarted, nothing died.
    processes_after = _processes(stack)
    replaced = {
        name: (sorted(before), sorted(processes_after.get(name, set())))
        for name, before in processes_before.items()
        if processes_after.get(name) != before
    }

    # They carry on: new events, admitted by the same web server, run by both workers.
    fresh = [
        gitea_event(stack.project, stack.new_key("after"), {"slow": 0.3}) for _ in range(NEW_RUNS)
    ]
    stack.provider(threads=4, redelivery_share=0).deliver_all(fresh)
    fresh_ids = [d.run_id for d in fresh]
    assert None not in fresh_ids
    checks.wait_terminal(stack.engine, fresh_ids, 60)
    steps_after = {
        w.name: checks.steps_by_worker(stack.engine, w.worker_id_prefixes(), fresh_ids)
        for w in stack.run_workers()
    }

    counts = checks.status_counts(stack.engine)
    per_event = checks.rows(
        stack.engine,
        """
        SELECT input->>'provider_event_id' AS key, count(*) AS n
        FROM awooop_run_state WHERE channel_type = 'gitea'
        GROUP BY 1
        """,
    )
    doubles = checks.double_completions(stack.engine)
    effects = checks.effects(stack.engine, stack.recorder)
    figures.update(
        {
            "processes_replaced": len(replaced),
            "new_runs_after_the_storm": NEW_RUNS,
            **{f"new_run_steps_by_{name}": n for name, n in steps_after.items()},
            "runs_by_status": counts,
            "claims_per_run": checks.attempts_histogram(stack.engine),
            "steps_completed_twice": len(doubles),
            **effects.figures,
            "scenario_s": round(time.monotonic() - started, 1),
        }
    )

    # Every distinct event has exactly one run; every redelivery was answered with it.
    keys = {d.key for d in deliveries}
    assert None not in {d.run_id for d in deliveries}
    assert provider.gave_up == []
    assert provider.redelivery_mismatches == []
    assert len({d.run_id for d in deliveries}) == EVENTS
    assert len(per_event) == EVENTS + NEW_RUNS
    assert [r for r in per_event if r["n"] != 1] == []
    assert keys <= {r["key"] for r in per_event}
    # The only 5xx is 503 with Retry-After; no connection was dropped.
    assert figures["http_5xx_not_503"] == 0
    assert provider.retry_after_missing == 0
    assert provider.connection_errors == 0
    # Every run terminal within the bound after the last fault.
    assert figures["within_bound"], (terminal_at - reference, BOUND_AFTER_LAST_FAULT)
    rejected = sum(b'"reject": true' in d.body for d in deliveries)
    assert counts == {
        "COMPLETED/COMPLETED": EVENTS + NEW_RUNS - rejected,
        "FAILED/COMPENSATED": rejected,
    }
    assert doubles == []
    assert effects.missing == []
    assert effects.unknown == []
    # Web and workers recovered by themselves.
    assert replaced == {}, f"processes replaced or gone (before, after): {replaced}"
    assert all(n > 0 for n in steps_after.values()), steps_after
