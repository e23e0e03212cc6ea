"""Cluster scenario 6 — beat on two hosts, one of them cut off.

The documented way to survive losing the ``ops`` host: a maintenance worker and a beat on
each of two hosts, ``ops`` and ``ops2`` (every sweep is then sent twice, and must be safe to
run twice). Runs of ``chaos-timers`` (each fails transiently 1–3 times — a retry timer each —
then has an Unknown outcome resolved after 1–3 polls — a resolver timer each) arrive in
three phases of :data:`PHASE` seconds: both ops hosts up; ``ops`` partitioned (its link
down); both up again. Then ``ops`` is cut off once more for the other sweeps: slow
``chaos-saga`` runs (Gitea channel) are taken by the worker hosts, and every worker holding
one is SIGKILLed (and started again, as an orchestrator would) in the middle of its slow step.

From PostgreSQL (an audit trigger on ``awooop_timer``) and the recorder:
- every run COMPLETED, every timer the runs had to set exists and none is left PENDING;
- timers kept firing while ``ops`` was cut off — all of those by ``ops2`` — and both hosts
  fired timers over the scenario;
- nothing fired twice: one audited change per timer; one claim per run plus one per timer;
  every handler call (``exec:…`` keys) seen once at the recorder, one effect per effect id;
- the reaper kept running while ``ops`` was cut off: each killed run was reaped by ``ops2``
  (its ``awooop_run_event`` row), sent again and COMPLETED before ``ops`` came back, with no
  step recorded twice.
"""

from __future__ import annotations

import collections
import random
import time

import pytest

from tests.chaos import checks, workflows
from tests.chaos.providers import api_event, gitea_event
from tests.cluster.checks import host_of
from tests.cluster.suite import SUITE
from tests.support.processes import wait_until

PHASE = max(20.0, 40.0 * SUITE.scale())  # seconds each: both up, ops cut off, both up
RUNS_PER_PHASE = SUITE.scaled(60, least=12)
KILLED_RUNS = 2  # slow runs whose worker is killed while ops is cut off
SLOW_STEP_S = 10.0  # long enough to kill the worker in it, short enough to finish after


def _db_now(stack) -> object:
    return checks.db_now(stack.engine)


def _kill_workers_mid_step(stack, provider) -> tuple[list[str], set[str]]:
    """Admit :data:`KILLED_RUNS` slow runs; once each is in its slow step (``reserve``
    journaled), SIGKILL every worker host's worker holding one and start it again. Returns
    the run ids and the hosts killed."""
    deliveries = [
        gitea_event(stack.project, stack.new_key("killed"), {"slow": SLOW_STEP_S})
        for _ in range(KILLED_RUNS)
    ]
    provider.deliver_all(deliveries)
    run_ids = [d.run_id for d in deliveries if d.run_id is not None]
    assert len(run_ids) == len(deliveries), deliveries

    def holders() -> dict[str, str] | None:
        held = checks.rows(
            stack.engine,
            """
            SELECT run_id::text, worker_id FROM awooop_run_state
            WHERE run_id::text = ANY(:ids) AND status = 'RUNNING'
              AND saga_steps @> '[{"step": "reserve", "status": "SUCCEEDED"}]'
            """,
            ids=run_ids,
        )
        return {r["run_id"]: r["worker_id"] for r in held} if len(held) == len(run_ids) else None

    wait_until(holders, 60, "the slow runs in their slow step")
    held = holders() or {}
    hosts = {host_of(worker_id) for worker_id in held.values()}
    for host in sorted(hosts):
        worker = stack.workers[host]
        assert worker.kill()
        worker.restart()
    return run_ids, hosts


@pytest.mark.timeout(900)
def test_timers_and_sweeps_keep_running_with_one_ops_host_cut_off_and_fire_once(cluster, figures):
    figures.scenario("6", "Beat on two hosts, one cut off")
    cluster.route(api=workflows.TIMERS_NAME, gitea=workflows.NAME)
    checks.install_timer_audit(cluster.engine)
    stack = cluster.start(ops_hosts=("ops", "ops2"))
    ops = stack.network["ops"]
    rng = random.Random(6)
    provider = stack.provider(threads=4, redelivery_share=0.0, rate=RUNS_PER_PHASE / PHASE)
    plans: dict[str, tuple[int, int]] = {}

    def phase() -> None:
        payloads = [
            {"fail_times": rng.randint(1, 3), "unknown_polls": rng.randint(1, 3)}
            for _ in range(RUNS_PER_PHASE)
        ]
        deliveries = [api_event(stack.project, stack.new_key("t"), p) for p in payloads]
        provider.deliver_all(deliveries)
        for d, p in zip(deliveries, payloads, strict=True):
            assert d.run_id is not None
            plans[d.run_id] = (p["fail_times"], p["unknown_polls"])

    started = time.monotonic()
    phase()
    ops.down()
    cut_from = _db_now(stack)
    phase()
    time.sleep(5.0)  # timers of the last runs admitted during the cut fall due meanwhile
    cut_until = _db_now(stack)
    ops.up()
    phase()
    checks.wait_terminal(stack.engine, None, 180)
    checks.wait_terminal(stack.engine, None, 60)
    total_s = time.monotonic() - started

    expected_timers: set[str] = set()
    expected_execs: set[str] = set()
    for run_id, (fail_times, unknown_polls) in plans.items():
        expected_timers |= workflows.timer_ids(run_id, fail_times, unknown_polls)
        expected_execs |= workflows.executions(run_id, fail_times, unknown_polls)
    timers = checks.rows(
        stack.engine,
        "SELECT timer_id, state, claimed_by FROM awooop_timer WHERE kind <> 'step_timeout'",
    )
    audit = checks.timer_firings(stack.engine)
    changes = [c for cs in audit.values() for c in cs]
    during_cut = [c for c in changes if cut_from <= c["at"] <= cut_until]
    fired_by_host = collections.Counter(host_of(c["claimed_by"]) for c in changes)
    during_by_host = collections.Counter(host_of(c["claimed_by"]) for c in during_cut)
    fired_twice = {t: len(cs) for t, cs in audit.items() if len(cs) > 1}
    claims = checks.claims_per_run(stack.engine)
    timers_of_run = collections.Counter(t["timer_id"].split(":", 1)[0] for t in timers)
    wrong_claims = {r: n for r, n in claims.items() if n != 1 + timers_of_run[r]}
    exec_counts = {
        k: n for k, n in stack.recorder.counts.items() if k.startswith(workflows.EXECUTION_PREFIX)
    }
    effect_ids = {f"{r}:{s}:forward" for r in plans for s in workflows.TIMER_EFFECT_STEPS}
    effects_seen = stack.recorder.keys() - set(exec_counts)
    counts = checks.status_counts(stack.engine)

    # The other sweeps while ops is cut off again: the reaper (and the orphan sweep or the
    # broker's redelivery) must bring back runs whose worker died, from ops2 alone.
    ops.down()
    killed_runs, killed_hosts = _kill_workers_mid_step(stack, provider)
    killed_recovered_s = checks.wait_terminal(stack.engine, killed_runs, 120)
    ops.up()
    reaped = checks.rows(
        stack.engine,
        "SELECT run_id::text, actor FROM awooop_run_event "
        "WHERE trigger = 'reaper' AND run_id::text = ANY(:ids)",
        ids=killed_runs,
    )
    killed_statuses = checks.rows(
        stack.engine,
        "SELECT status || '/' || saga_status AS s FROM awooop_run_state "
        "WHERE run_id::text = ANY(:ids)",
        ids=killed_runs,
    )

    figures.update(
        {
            "runs": len(plans),
            "phase_s": PHASE,
            "scenario_s": round(total_s, 1),
            "ops_cut_off_s": round((cut_until - cut_from).total_seconds(), 1),
            "timers": len(timers),
            "timers_expected": len(expected_timers),
            "timers_by_state": dict(collections.Counter(t["state"] for t in timers)),
            "timer_firings_by_host": dict(sorted(fired_by_host.items())),
            "timer_firings_while_ops_cut_off_by_host": dict(sorted(during_by_host.items())),
            "timers_fired_more_than_once": len(fired_twice),
            "claims": sum(claims.values()),
            "runs_with_wrong_claim_count": len(wrong_claims),
            "executions_expected": len(expected_execs),
            "executions_run_twice": sum(1 for n in exec_counts.values() if n > 1),
            "effects_expected": len(effect_ids),
            "effects_recorded": len(effects_seen),
            "runs_by_status": counts,
            "runs_killed_mid_step_while_ops_cut_off": len(killed_runs),
            "worker_hosts_killed": sorted(killed_hosts),
            "reaped_by_host": dict(collections.Counter(host_of(r["actor"]) for r in reaped)),
            "killed_runs_done_after_s": round(killed_recovered_s, 1),
            **provider.figures(),
        }
    )

    assert counts == {"COMPLETED/COMPLETED": len(plans)}
    assert {t["timer_id"] for t in timers} == expected_timers
    assert all(t["state"] != "PENDING" for t in timers)
    assert during_cut, "no timer fired while ops was cut off"
    assert set(during_by_host) == {"ops2"}, during_by_host
    assert set(fired_by_host) == {"ops", "ops2"}, fired_by_host
    assert fired_twice == {}, list(fired_twice.items())[:5]
    assert wrong_claims == {}, list(wrong_claims.items())[:5]
    assert set(exec_counts) == expected_execs
    assert all(n == 1 for n in exec_counts.values())
    assert effects_seen == effect_ids
    assert stack.recorder.repeated() == {}
    assert sorted(r["run_id"] for r in reaped) == sorted(killed_runs), reaped
    assert {host_of(r["actor"]) for r in reaped} == {"ops2"}, reaped
    assert [r["s"] for r in killed_statuses] == ["COMPLETED/COMPLETED"] * len(killed_runs)
    assert checks.double_completions(stack.engine) == []
