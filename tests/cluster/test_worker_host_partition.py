"""Cluster scenario 2 — a worker host partitioned from the database mid-run.

While both worker hosts are busy with a stream of runs (one in ten with a 1.5 s step),
``w1``'s link goes down: its packets vanish both ways (nothing is reset), which cuts it from
PostgreSQL, Redis and the recorder at once. The partition lasts longer than the lease,
until ``w2`` has finished every run ``w1`` held — which must happen within lease + reaper +
30 s of the cut.

Everything those runs are in PostgreSQL is snapshotted; then the link comes back, and what
``w1`` wrote meanwhile (renewals, journal writes, completions, retransmitted by TCP or sent
again on new connections) reaches the server late. Once ``w1`` has had time to try (it
reports each of those runs lost, or the deadline passes), the snapshot must be unchanged:
every late write was refused. No step completed twice; one effect per effect id at the
recorder. Then ``w1`` — the same processes, not restarted — must complete new work within
:data:`BACK_TO_WORK_BOUND` of the heal (reported: how long it took).
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.chaos import checks
from tests.chaos.providers import api_event
from tests.chaos.stack import LEASE_TTL, REAPER_INTERVAL
from tests.cluster import checks as cluster_checks
from tests.cluster.conftest import SUITE
from tests.support.processes import wait_until

STREAM = SUITE.scaled(400, least=60)
SLOW_SHARE = 10  # one run in ten has a 1.5 s step
RECOVERY_BOUND = LEASE_TTL + REAPER_INTERVAL + 30
BACK_TO_WORK_BOUND = 120.0


def run_partition(stack, figures) -> None:
    """The scenario on a started stack (also scenario 7 on RabbitMQ)."""
    cut = stack.worker("w1")
    host = stack.network["w1"]
    pids_before = (cut.pid, cut.generation)
    provider = stack.provider(threads=4, redelivery_share=0.0)

    # Given w1 in the middle of a stream of runs
    stream = [
        api_event(
            stack.project, stack.new_key("stream"), {"slow": 1.5} if i % SLOW_SHARE == 0 else {}
        )
        for i in range(STREAM)
    ]
    feeder = threading.Thread(target=provider.deliver_all, args=(stream,), name="feeder")
    feeder.start()
    wait_until(
        lambda: len(checks.held_by(stack.engine, cut.worker_id_prefixes())) >= 2,
        60,
        "w1 to hold two runs",
    )

    # When its link goes down (a partition) for longer than the lease
    host.down()
    partitioned_at = time.monotonic()
    time.sleep(0.5)  # a write already on the wire lands now; nothing after it can
    held = checks.held_by(stack.engine, cut.worker_id_prefixes())
    assert held, "w1 held no run when its link went down"
    feeder.join(timeout=300)
    all_runs = [d.run_id for d in stream]
    recovered_in = checks.wait_terminal(stack.engine, held, RECOVERY_BOUND) + 0.5
    checks.wait_terminal(stack.engine, all_runs, 300)
    time.sleep(max(0.0, partitioned_at + 2 * LEASE_TTL - time.monotonic()))
    before = checks.snapshot(stack.engine, all_runs)
    finishers = {
        e["worker_id"]
        for e in checks.succeeded_entries(stack.engine)
        if e["run_id"] in held and e["step"] == "report"
    }
    partition_s = time.monotonic() - partitioned_at
    host.up()
    healed_at = time.monotonic()

    # Then its late writes reach the server and every one of them is refused
    def tried_all() -> bool:
        lost = {r.get("run_id") for r in cut.actions("lease_lost")}
        return set(held) <= lost

    try:
        wait_until(tried_all, 90, "w1 to notice it lost every lease it held")
        noticed_in = round(time.monotonic() - healed_at, 1)
    except AssertionError:
        noticed_in = None
    time.sleep(1.0)  # a write still in flight lands (or not) now
    after = checks.snapshot(stack.engine, all_runs)
    changes = checks.changed(before, after)
    late_effects = {
        k: n for k, n in stack.recorder.repeated().items() if k.split(":", 1)[0] in held
    }

    # And w1 goes back to work without a restart: new runs arrive a few at a time until
    # it has completed a step of one (TCP retransmits to a link that came back only after
    # its back-off, so this takes seconds)
    fresh = []
    back_after = None
    while time.monotonic() < healed_at + BACK_TO_WORK_BOUND:
        batch = [api_event(stack.project, stack.new_key("after"), {}) for _ in range(4)]
        provider.deliver_all(batch)
        fresh += batch
        if cluster_checks.steps_by_host(stack.engine, [d.run_id for d in fresh]).get("w1"):
            back_after = time.monotonic() - healed_at
            break
        time.sleep(0.5)
    fresh_ids = [d.run_id for d in fresh]
    checks.wait_terminal(stack.engine, fresh_ids, 180)
    fresh_by_host = cluster_checks.steps_by_host(stack.engine, fresh_ids)
    doubles = checks.double_completions(stack.engine)
    effects = checks.effects(stack.engine, stack.recorder)
    counts = checks.status_counts(stack.engine)

    figures.update(
        {
            "runs": STREAM + len(fresh),
            "runs_held_by_w1_when_cut": len(held),
            "partition_s": round(partition_s, 1),
            "held_runs_finished_by_w2_after_s": round(recovered_in, 1),
            "recovery_bound_s": RECOVERY_BOUND,
            "held_runs_finished_by_w1": sum(cut.owns(w) for w in finishers),
            "w1_noticed_lost_leases_after_heal_s": noticed_in,
            "w1_lease_lost_reports": len(cut.actions("lease_lost")),
            "fields_changed_after_heal": len(changes),
            "late_effects_at_recorder_deduplicated": len(late_effects),
            "runs_by_worker_host": cluster_checks.runs_by_host(stack.engine, all_runs),
            "new_runs_after_heal": len(fresh),
            "w1_back_to_work_after_heal_s": back_after and round(back_after, 1),
            "new_run_steps_by_host": fresh_by_host,
            "w1_restarted": (cut.pid, cut.generation) != pids_before,
            "runs_by_status": counts,
            "steps_completed_twice": len(doubles),
            **provider.figures(),
            **effects.figures,
        }
    )

    assert recovered_in <= RECOVERY_BOUND
    assert changes == [], "\n".join(changes)
    assert not any(cut.owns(w) for w in finishers)
    assert (cut.pid, cut.generation) == pids_before and cut.alive, "w1 was restarted"
    assert back_after is not None, f"w1 completed no new step {BACK_TO_WORK_BOUND:.0f} s later"
    assert doubles == []
    assert effects.missing == [] and effects.unknown == []
    assert counts == {"COMPLETED/COMPLETED": STREAM + len(fresh)}


@pytest.mark.timeout(1200)
def test_partitioned_worker_host_is_taken_over_and_its_late_writes_are_refused(cluster, figures):
    figures.scenario("2", "A worker host partitioned from the database (link down)")
    run_partition(cluster.start(), figures)
