"""Cluster scenarios 10.1–10.4 — losing the PostgreSQL primary (Patroni, etcd).

PostgreSQL is a Patroni cluster of its own (:mod:`tests.cluster.patroni`): the primary on
``pg1``, a standby on ``pg2``, etcd on ``etcd``; every AwoooP process reaches the primary
through the libpq multi-host URL ``…?host=pg1:5432&host=pg2:5432&target_session_attrs=
read-write``. A stream of API admissions (:data:`RATE` a second, one in ten with a 0.5 s
step, a tenth delivered twice) runs while, a third of the way in:

- 10.1: ``pg1``'s host dies (Patroni and PostgreSQL SIGKILLed); ``pg2`` is promoted once the
  leader key expires;
- 10.2: ``pg1``'s link goes down (it still holds its clients' connections, which hang); its
  Patroni demotes it, ``pg2`` is promoted; after the stream ``pg1`` comes back and must be
  a standby;
- 10.3: an operator asks for a switchover (``patronictl switchover``) to ``pg2``.

With ``synchronous_mode`` (10.1–10.3), asserted afterwards, from the new primary and the
recorder: every admission answered 202 has its run, and every run is terminal (completed);
no delivery given up; every 5xx answered was 503 with ``Retry-After``; no step SUCCEEDED
twice in a journal; no lease epoch issued twice — no (run, epoch) under which two processes
made effects (the recorder: each effect carries its ``command_id``, which ends with the
epoch, and its pid), no (run, epoch) with two writers in a journal; no two epochs of a run
acting at once (an older epoch's effect after a newer one's first). Reported: how long
until the new primary accepted writes and until the web answered 202 again.

10.4 — the same with asynchronous replication, in steps: runs are admitted while no worker
runs, and replayed by the standby; then the standby's replication link is cut (it streams
through a proxy on the bridge, which stops forwarding), more admissions are acknowledged by
``pg1`` alone, and workers start and complete every run on ``pg1``; then ``pg1``'s host dies
and ``pg2`` is promoted (``maximum_lag_on_failover`` is large, as Patroni allows). Asserted:
every admission acknowledged after the cut is lost (all of them, and at least one), and every
run admitted before the cut is claimed again under the lease epoch ``pg1`` had already issued
for it — its handlers act under that epoch before the kill and again after (the recorder).
This is the hazard the synchronous scenarios show absent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests
from sqlalchemy import create_engine

from tests.chaos import checks
from tests.chaos.providers import Delivery, Provider, api_event
from tests.chaos.stack import LEASE_TTL, REAPER_INTERVAL, TIMINGS, Worker
from tests.cluster import checks as cluster_checks
from tests.cluster.patroni import DCS_TIMINGS, PatroniCluster
from tests.cluster.stack import ClusterStack
from tests.cluster.suite import SUITE
from tests.support.processes import wait_until

RATE = 8.0
ADMISSIONS = SUITE.scaled(1200, least=240)
SLOW_SHARE = 10
ORPHAN = float(TIMINGS["AWOOOP_ORPHAN_AFTER_SECONDS"]) + float(
    TIMINGS["AWOOOP_ORPHAN_INTERVAL_SECONDS"]
)
FAILOVER_BOUND = DCS_TIMINGS["ttl"] + 3 * DCS_TIMINGS["loop_wait"] + 30
TERMINAL_BOUND = LEASE_TTL + REAPER_INTERVAL + ORPHAN + 90
# Scenario 10.4: admissions acknowledged by pg1 while pg2 receives nothing.
LOST_WINDOW = SUITE.scaled(40, least=16)


def _deliveries(stack: ClusterStack, n: int, prefix: str) -> list[Delivery]:
    return [
        api_event(
            stack.project, stack.new_key(prefix), {"slow": 0.5} if i % SLOW_SHARE == 3 else {}
        )
        for i in range(n)
    ]


def _answered(deliveries: list[Delivery]) -> int:
    return sum(d.status is not None for d in deliveries)


def _probe_until_admitted(
    stack: ClusterStack, since: float, bound: float
) -> tuple[list[Delivery], float | None]:
    """POST one new admission every 0.2 s (no retries) until one is answered 202; the
    probes answered 202, and how long after ``since`` the first was."""
    admitted: list[Delivery] = []
    session = requests.Session()
    while time.monotonic() < since + bound:
        probe = api_event(stack.project, stack.new_key("probe"), {})
        try:
            response = session.post(
                stack.web_url + probe.path, headers=probe.headers, data=probe.body, timeout=15
            )
        except requests.RequestException:
            session = requests.Session()
            continue
        if response.status_code == 202:
            probe.status = 202
            probe.run_id = response.json()["run_id"]
            admitted.append(probe)
            return admitted, time.monotonic() - since
        time.sleep(0.2)
    return admitted, None


def _stream_with_fault(
    stack: ClusterStack,
    members: PatroniCluster,
    fault: Callable[[], Any],
    new_leader: str,
    figures: Any,
) -> tuple[list[Delivery], Provider, Any]:
    """Deliver :data:`ADMISSIONS` events; a third of the way in, ``fault()``; wait for
    ``new_leader`` and for the web to admit again. Returns every acknowledged delivery,
    the provider and what ``fault()`` returned."""
    deliveries = _deliveries(stack, ADMISSIONS, "ha")
    provider = stack.provider(
        threads=8, redelivery_share=0.1, rate=RATE, max_attempts=30, max_delay=3.0
    )
    outcome: dict[str, Any] = {}

    def inject() -> None:
        try:
            wait_until(lambda: _answered(deliveries) >= ADMISSIONS // 3, 300, "a third answered")
            at = time.monotonic()
            outcome["fault_result"] = fault()
            outcome["fault_call_s"] = time.monotonic() - at
            members.wait_leader(new_leader, FAILOVER_BOUND)
            outcome["leader_after_s"] = time.monotonic() - at
            outcome["probes"], outcome["admitting_after_s"] = _probe_until_admitted(
                stack, at, FAILOVER_BOUND + 60
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=inject, name="fault")
    started = time.monotonic()
    thread.start()
    provider.deliver_all(deliveries)
    thread.join(timeout=FAILOVER_BOUND + 400)
    assert not thread.is_alive(), "the fault thread did not finish"
    if "error" in outcome:
        raise outcome["error"]
    figures.update(
        {
            "admissions": ADMISSIONS,
            "stream_s": round(time.monotonic() - started, 1),
            "new_primary_writable_after_s": round(outcome["leader_after_s"], 1),
            "admitting_again_after_s": outcome["admitting_after_s"]
            and round(outcome["admitting_after_s"], 1),
        }
    )
    assert outcome["admitting_after_s"] is not None, "the web never admitted again"
    acknowledged = [d for d in deliveries + outcome["probes"] if d.run_id]
    return acknowledged, provider, outcome.get("fault_result")


def _check_nothing_lost(
    stack: ClusterStack, acknowledged: list[Delivery], provider: Provider, figures: Any
) -> None:
    stack.engine.dispose()  # its pooled connections were to the old primary
    waited = checks.wait_terminal(stack.engine, None, TERMINAL_BOUND)
    ids = {d.run_id for d in acknowledged}
    present = {
        r["run_id"] for r in checks.rows(stack.engine, "SELECT run_id::text FROM awooop_run_state")
    }
    lost = sorted(i for i in ids if i not in present)
    doubles = checks.double_completions(stack.engine)
    twice = cluster_checks.epochs_issued_twice(stack.recorder)
    journal_twice = cluster_checks.journal_epochs_with_two_writers(stack.engine)
    overlapping = cluster_checks.overlapping_handlers(stack.recorder)
    effects = checks.effects(stack.engine, stack.recorder)
    counts = checks.status_counts(stack.engine)
    figures.update(
        {
            "acknowledged_runs": len(ids),
            "acknowledged_runs_lost": len(lost),
            "all_terminal_after_stream_s": round(waited, 1),
            "runs_by_status": counts,
            "claims_per_run": checks.attempts_histogram(stack.engine),
            "steps_completed_twice": len(doubles),
            "lease_epochs_acted_on_by_two_processes": len(twice),
            "lease_epochs_with_two_journal_writers": len(journal_twice),
            "runs_with_overlapping_handlers": len(overlapping),
            **provider.figures(),
            "http_5xx_not_503": sum(
                n for s, n in provider.answers.items() if s >= 500 and s != 503
            ),
            **effects.figures,
        }
    )
    assert lost == [], f"{len(lost)} acknowledged admissions have no run, e.g. {lost[:5]}"
    assert provider.gave_up == []
    assert provider.redelivery_mismatches == []
    assert figures["http_5xx_not_503"] == 0
    assert provider.retry_after_missing == 0
    assert set(provider.answers) <= {200, 202, 503}, provider.answers
    assert counts == {"COMPLETED/COMPLETED": len(present)}
    assert doubles == []
    assert twice == {}, twice
    assert journal_twice == []
    assert overlapping == [], overlapping[:5]
    assert effects.missing == []


@pytest.mark.timeout(900)
def test_primary_killed_standby_promoted_nothing_acknowledged_lost(open_ha_cluster, figures):
    figures.scenario("10.1", "PostgreSQL primary killed; Patroni promotes the synchronous standby")
    with open_ha_cluster(synchronous=True) as (members, cluster):
        stack = cluster.start()
        acknowledged, provider, result = _stream_with_fault(
            stack, members, lambda: members.kill_host("pg1"), "pg2", figures
        )
        _check_nothing_lost(stack, acknowledged, provider, figures)
        assert provider.connection_errors == 0


@pytest.mark.timeout(900)
def test_primary_isolated_split_brain_nothing_acknowledged_lost(open_ha_cluster, figures):
    figures.scenario(
        "10.2",
        "PostgreSQL primary isolated (link down, clients' connections held); standby promoted",
    )
    with open_ha_cluster(synchronous=True) as (members, cluster):
        stack = cluster.start()
        acknowledged, provider, result = _stream_with_fault(
            stack, members, lambda: members.isolate("pg1"), "pg2", figures
        )
        # The old primary comes back: it must follow the new one, never accept writes again.
        rejoined_at = time.monotonic()
        members.rejoin("pg1")
        members.wait_replicating("pg2", "pg1", 180)
        figures["old_primary_streaming_after_rejoin_s"] = round(time.monotonic() - rejoined_at, 1)
        assert members.leader() == "pg2"
        _check_nothing_lost(stack, acknowledged, provider, figures)


@pytest.mark.timeout(900)
def test_operator_switchover_nothing_acknowledged_lost(open_ha_cluster, figures):
    figures.scenario("10.3", "PostgreSQL switchover asked by an operator (patronictl switchover)")
    with open_ha_cluster(synchronous=True) as (members, cluster):
        stack = cluster.start()
        acknowledged, provider, result = _stream_with_fault(
            stack, members, lambda: members.switchover("pg1", "pg2"), "pg2", figures
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Successfully switched over" in result.stdout, result.stdout
        _check_nothing_lost(stack, acknowledged, provider, figures)
        assert provider.connection_errors == 0


@pytest.mark.timeout(900)
def test_asynchronous_replication_loses_acknowledged_admissions_and_reissues_epochs(
    open_ha_cluster, figures
):
    figures.scenario(
        "10.4", "Asynchronous replication: the primary killed while the standby lags (what breaks)"
    )
    with open_ha_cluster(synchronous=False, cuttable_replication=True) as (members, cluster):
        stack = cluster.start(workers=())
        provider = stack.provider(threads=4, redelivery_share=0.0, rate=RATE, max_attempts=30)
        # Given runs admitted while no worker runs, on the standby too
        before = provider.deliver_all(_deliveries(stack, LOST_WINDOW, "before"))
        assert all(d.status == 202 for d in before)
        _wait_on_standby(members, stack, "pg2", [d.run_id for d in before])
        # and a standby that then receives nothing more from a primary that still serves
        members.cut_replication()
        received = members.receive_lsn("pg2")
        during = provider.deliver_all(_deliveries(stack, LOST_WINDOW, "during"))
        acknowledged_during = [d for d in during if d.status == 202]
        # When workers claim and complete every run on the old primary
        for name in ("w1", "w2"):
            worker = Worker(stack, name, "runs,notifications", 2, host=stack.network[name])
            stack.workers[name] = worker
            worker.spawn()
        for worker in stack.workers.values():
            worker.wait_ready()
        checks.wait_terminal(stack.engine, None, TERMINAL_BOUND)
        assert members.receive_lsn("pg2") == received, "the standby still received WAL"
        # and the primary's host dies and the lagging standby is promoted
        killed_at = time.monotonic()
        members.kill_host("pg1")
        members.wait_leader("pg2", FAILOVER_BOUND)
        promoted_after = time.monotonic() - killed_at
        after = provider.deliver_all(_deliveries(stack, LOST_WINDOW, "after"))
        stack.engine.dispose()
        checks.wait_terminal(stack.engine, None, TERMINAL_BOUND)
        # Then every admission acknowledged by the old primary after the cut is gone
        present = {
            r["run_id"]
            for r in checks.rows(stack.engine, "SELECT run_id::text FROM awooop_run_state")
        }
        lost = [d for d in acknowledged_during if d.run_id not in present]
        kept_before = [d for d in before if d.run_id in present]
        # and every run admitted before the cut was claimed again under the lease epoch the
        # old primary had already issued for it: its handlers acted under that epoch twice.
        reissued = cluster_checks.epochs_acted_on_before_and_after(stack.recorder, killed_at)
        reissued_runs = {key.rsplit(":", 1)[0] for key in reissued}
        effects = checks.effects(stack.engine, stack.recorder)
        figures.update(
            {
                "admissions_before_cut": len(before),
                "admissions_acknowledged_during_cut": len(acknowledged_during),
                "acknowledged_admissions_lost": len(lost),
                "admissions_before_cut_kept": len(kept_before),
                "runs_before_cut_whose_epoch_was_issued_again": len(
                    reissued_runs & {d.run_id for d in before}
                ),
                "admissions_after_promotion": len(after),
                "standby_promoted_after_s": round(promoted_after, 1),
                "recorder_effects_of_runs_the_database_forgot": len(effects.unknown),
                "lease_epochs_acted_on_by_two_processes": len(
                    cluster_checks.epochs_issued_twice(stack.recorder)
                ),
                "runs_by_status": checks.status_counts(stack.engine),
            }
        )
        assert len(kept_before) == len(before)
        assert acknowledged_during, "no admission was acknowledged during the cut"
        assert len(lost) == len(acknowledged_during), (
            f"{len(acknowledged_during) - len(lost)} admissions acknowledged during the cut"
            " survived"
        )
        assert {d.run_id for d in before} <= reissued_runs, "an epoch was not issued again"
        assert all(d.status == 202 for d in after)


def _wait_on_standby(
    members: PatroniCluster, stack: ClusterStack, standby: str, run_ids: list[str]
) -> None:
    """Wait until ``standby`` has replayed the runs ``run_ids`` (a hot standby reads)."""
    engine = create_engine(members.member_url(standby, stack.database))

    def replayed() -> bool:
        found = checks.rows(
            engine,
            "SELECT count(*) AS n FROM awooop_run_state WHERE run_id::text = ANY(:ids)",
            ids=run_ids,
        )
        return found[0]["n"] == len(run_ids)

    try:
        wait_until(replayed, 30, f"{standby} to replay the admitted runs")
    finally:
        engine.dispose()
