"""Scenario 6 — two beats over runs made of timers.

Two Celery beat processes, each with its own schedule file (what a deployment gets when two
replicas both run beat), send every sweep twice; two maintenance workers run those sweeps at
the same moments. For ``DURATION`` seconds (five minutes at full size;
``AWOOOP_CHAOS_SCALE`` scales it with the number of runs) runs of ``chaos-timers`` are
admitted in bursts of ten at an even pace: each fails transiently 1–3 times (a retry timer
each, short back-off), then has a step whose outcome is Unknown, resolved after 1–3 more
polls (a resolver timer each) — about 1,000 timers at full size.

Then, from PostgreSQL and the recorder:
- every run COMPLETED;
- each timer fired exactly once: the set of timers is the one the runs must have set, none is
  left PENDING, and the audit trigger on ``awooop_timer`` (``chaos_timer_audit``) saw exactly
  one change per timer — PENDING to FIRED (a timer whose run was claimed by another nudge
  first is SKIPPED, counted);
- each wake-up executed once: one claim per run plus one per timer (``awooop_run_event``);
  one journal entry per (run, phase, step, attempt); the recorder saw every handler call
  (``exec:…`` keys) exactly once and no other, and one effect per effect id;
- both beats sent sweeps, and both maintenance workers fired timers.
"""

from __future__ import annotations

import collections
import random
import time

import pytest

from tests.chaos import checks, workflows
from tests.chaos.providers import api_event
from tests.chaos.report import scale, scaled
from tests.support.processes import wait_until

TIMERS = scaled(1000, least=100)
# Two failures and two unknown polls on average: five timers a run.
RUNS = max(20, round(TIMERS / 5))
DURATION = max(60.0, 300.0 * scale())
# Runs are admitted over the window but its last 20 s, so their timers fall while both beats run.
ADMISSION_WINDOW = DURATION - 20
BOUND_AFTER_WINDOW = 60.0
BURST = 10
# The timers this scenario sets and checks: every step's timeout timer stays PENDING (its run
# finished long before it falls due) and is no part of it.
SCENARIO_TIMERS = "kind <> 'step_timeout'"


@pytest.mark.timeout(900)
def test_two_beats_fire_each_timer_once_and_wake_each_run_once(chaos_stack, figures):
    figures.scenario("6", "Two beats over retry and resolver timers")
    stack = chaos_stack
    stack.route(api=workflows.TIMERS_NAME)
    checks.install_timer_audit(stack.engine)
    stack.start(beats=2, maintenance_workers=2)

    rng = random.Random(6)
    plans = []
    deliveries = []
    for i in range(RUNS):
        fail_times, unknown_polls = rng.randint(1, 3), rng.randint(1, 3)
        plans.append((fail_times, unknown_polls))
        payload = {"n": i, "fail_times": fail_times, "unknown_polls": unknown_polls}
        deliveries.append(api_event(stack.project, stack.new_key("timers"), payload))

    # In bursts: the runs of a burst set their timers together, so due timers come in
    # clusters and the two sweeps race for the same ones.
    provider = stack.provider(threads=BURST, redelivery_share=0.0)
    bursts = [deliveries[i : i + BURST] for i in range(0, RUNS, BURST)]
    started = time.monotonic()
    for i, burst in enumerate(bursts):
        time.sleep(max(0.0, started + i * ADMISSION_WINDOW / len(bursts) - time.monotonic()))
        provider.deliver_all(burst)
    admitted_in = time.monotonic() - started
    # Both beats keep running for the whole window, then until every run is terminal.
    time.sleep(max(0.0, started + DURATION - time.monotonic()))
    waited = checks.wait_terminal(stack.engine, None, BOUND_AFTER_WINDOW)
    # A timer whose run another nudge woke first is marked SKIPPED by the next sweep.
    wait_until(
        lambda: (
            not checks.rows(
                stack.engine,
                f"SELECT 1 FROM awooop_timer WHERE state = 'PENDING' AND {SCENARIO_TIMERS} LIMIT 1",
            )
        ),
        30,
        "no timer left PENDING",
    )
    total = time.monotonic() - started

    run_ids = [d.run_id for d in deliveries]
    expected_timers: set[str] = set()
    expected_execs: set[str] = set()
    timers_of_run: dict[str, int] = {}
    for run_id, (fail_times, unknown_polls) in zip(run_ids, plans, strict=True):
        assert run_id is not None
        ids = workflows.timer_ids(run_id, fail_times, unknown_polls)
        timers_of_run[run_id] = len(ids)
        expected_timers |= ids
        expected_execs |= workflows.executions(run_id, fail_times, unknown_polls)

    timer_rows = checks.rows(
        stack.engine,
        "SELECT timer_id, kind, state, claimed_by,"
        " extract(epoch FROM fired_at - due_at)::float8 AS late_s FROM awooop_timer"
        f" WHERE {SCENARIO_TIMERS}",
    )
    states = collections.Counter(r["state"] for r in timer_rows)
    audit = checks.timer_firings(stack.engine)
    fired_more_than_once = {t: len(c) for t, c in audit.items() if len(c) > 1}
    not_from_pending = [c[0] for c in audit.values() if c[0]["old_state"] != "PENDING"]
    never_fired = [r["timer_id"] for r in timer_rows if r["timer_id"] not in audit]
    sweepers = collections.Counter(
        (r["claimed_by"] or "").rsplit(":", 1)[0] for r in timer_rows if r["claimed_by"]
    )
    sweep_transactions = len({c["txid"] for changes in audit.values() for c in changes})

    claims = checks.claims_per_run(stack.engine)
    extra_claims = {
        r: claims.get(r, 0) - (1 + n) for r, n in timers_of_run.items() if claims.get(r, 0) != 1 + n
    }
    duplicates = checks.duplicate_journal_entries(stack.engine)
    recorder = stack.recorder
    seen = recorder.keys()
    exec_seen = {k for k in seen if k.startswith(workflows.EXECUTION_PREFIX)}
    repeated = recorder.repeated()
    exec_repeated = {k: n for k, n in repeated.items() if k.startswith(workflows.EXECUTION_PREFIX)}
    effect_ids = {f"{r}:{s}:forward" for r in run_ids for s in workflows.TIMER_EFFECT_STEPS}
    effects_seen = seen - exec_seen
    beat_sends = {p.name: p.log().count("Sending due task fire-due-timers") for p in stack.beats}
    lateness = [r["late_s"] for r in timer_rows if r["late_s"] is not None]

    figures.update(
        {
            "runs": RUNS,
            "duration_s": round(DURATION, 1),
            "beats": len(stack.beats),
            "maintenance_workers": len(stack.maintenance_workers()),
            "admission_window_s": round(admitted_in, 1),
            "all_terminal_after_window_s": round(waited, 1),
            "scenario_s": round(total, 1),
            "runs_by_status": checks.status_counts(stack.engine),
            "timers": len(timer_rows),
            "timers_expected": len(expected_timers),
            "timers_by_kind": dict(collections.Counter(r["kind"] for r in timer_rows)),
            # Resolver polls are retry timers too: told apart by their ids.
            "timers_resolver_polls": sum(":unsure:retry:" in r["timer_id"] for r in timer_rows),
            "timers_by_state": dict(sorted(states.items())),
            "timers_fired_more_than_once": len(fired_more_than_once),
            "timers_never_fired": len(never_fired),
            "timer_fired_late_p50_s": round(checks.percentile(lateness, 0.5), 2),
            "timer_fired_late_p99_s": round(checks.percentile(lateness, 0.99), 2),
            "fire_due_timers_sent_by_beat": beat_sends,
            "timers_fired_by_sweeper_process": len(sweepers),
            "sweep_transactions_firing_timers": sweep_transactions,
            "sweep_transactions_overlapping_another_sweepers": checks.overlapping_sweeps(audit),
            "claims": sum(claims.values()),
            "claims_expected": len(run_ids) + len(expected_timers),
            "runs_with_extra_or_missing_claims": len(extra_claims),
            "journal_entries_recorded_twice": len(duplicates),
            "executions_expected": len(expected_execs),
            "executions_recorded": recorder.raw_calls
            - sum(n for k, n in recorder.counts.items() if not k.startswith("exec:")),
            "executions_run_twice": len(exec_repeated),
            "effects_expected": len(effect_ids),
            "effects_recorded": len(effects_seen),
            "effect_keys_seen_more_than_once": len(set(repeated) - set(exec_repeated)),
            "provider_5xx": provider.figures()["http_5xx"],
        }
    )

    assert None not in run_ids and len(set(run_ids)) == RUNS
    assert all(p.popen.poll() is None for p in stack.beats), "a beat exited"
    assert all(n > 0 for n in beat_sends.values()), beat_sends
    assert checks.status_counts(stack.engine) == {"COMPLETED/COMPLETED": RUNS}
    # Each timer fired exactly once.
    assert {r["timer_id"] for r in timer_rows} == expected_timers
    assert states.get("PENDING", 0) == 0
    assert fired_more_than_once == {}, list(fired_more_than_once.items())[:5]
    assert not_from_pending == []
    assert never_fired == []
    assert len(sweepers) >= 2, sweepers  # both maintenance workers took part
    # Each wake-up executed once.
    assert extra_claims == {}, list(extra_claims.items())[:5]
    assert duplicates == [], duplicates[:5]
    assert exec_seen == expected_execs
    assert exec_repeated == {}, list(exec_repeated.items())[:5]
    assert effects_seen == effect_ids
