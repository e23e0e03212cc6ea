"""Cluster scenario 2 — a worker host partitioned from the database mid-run.

While both worker hosts are busy with a stream of runs (six a second, one in ten with a
1.5 s step), ``w1``'s link goes down: its packets vanish both ways (nothing is reset), which
cuts it from PostgreSQL, Redis and the recorder at once. The partition lasts longer than the lease,
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

import pytest

from tests.chaos import checks
from tests.chaos.stack import LEASE_TTL, REAPER_INTERVAL
from tests.chaos.takeover import cut_mid_stream
from tests.cluster import checks as cluster_checks
from tests.cluster.suite import SUITE

STREAM = SUITE.scaled(400, least=60)
SLOW_SHARE = 10  # one run in ten has a 1.5 s step
# ... and the first dozen, which fill all four worker processes: at a fifth of the size, a
# stream of mostly fast runs ended before w1 ever held two runs at once.
SLOW_FIRST = 12
# Below what w2 does alone, so the recovery time measures the take-over, not a backlog: the
# reaper's message for a taken-over run queues behind every message sent before it.
STREAM_RATE = 6.0
RECOVERY_BOUND = LEASE_TTL + REAPER_INTERVAL + 30
BACK_TO_WORK_BOUND = 120.0


def run_partition(stack, figures) -> None:
    """The scenario on a started stack (also scenario 7 on RabbitMQ)."""
    cut = stack.worker("w1")
    host = stack.network["w1"]
    pids_before = (cut.pid, cut.generation)
    provider = stack.provider(threads=4, redelivery_share=0.0, rate=STREAM_RATE)

    # Given w1 in the middle of a stream of runs, when its link goes down (a partition) for
    # longer than the lease, then once it is back every late write of w1 is refused
    takeover = cut_mid_stream(
        stack,
        cut,
        provider,
        host.down,
        host.up,
        runs=STREAM,
        recovery_bound=RECOVERY_BOUND,
        slow_share=SLOW_SHARE,
        slow_first=SLOW_FIRST,
        notice_timeout=90,
    )

    # And w1 goes back to work without a restart: new runs arrive a few at a time until
    # it has completed a step of one (TCP retransmits to a link that came back only after
    # its back-off, so this takes seconds)
    fresh, back_after = cluster_checks.back_to_work(
        stack, provider, "w1", takeover.healed_at, BACK_TO_WORK_BOUND
    )
    fresh_ids = [d.run_id for d in fresh]
    checks.wait_terminal(stack.engine, fresh_ids, 180)
    fresh_by_host = cluster_checks.steps_by_host(stack.engine, fresh_ids)
    doubles = checks.double_completions(stack.engine)
    effects = checks.effects(stack.engine, stack.recorder)
    counts = checks.status_counts(stack.engine)

    figures.update(
        {
            "runs": STREAM + len(fresh),
            "runs_held_by_w1_when_cut": len(takeover.held),
            "partition_s": round(takeover.cut_s, 1),
            "held_runs_finished_by_w2_after_s": round(takeover.taken_over_in, 1),
            "recovery_bound_s": RECOVERY_BOUND,
            "held_runs_finished_by_w1": takeover.finished_by_cut_worker,
            "w1_noticed_lost_leases_after_heal_s": takeover.noticed_in,
            "w1_lease_lost_reports": len(cut.actions("lease_lost")),
            "fields_changed_after_heal": len(takeover.changes),
            "late_effects_at_recorder_deduplicated": takeover.late_effects,
            "runs_by_worker_host": cluster_checks.runs_by_host(stack.engine, takeover.run_ids),
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

    assert takeover.taken_over_in <= RECOVERY_BOUND
    assert takeover.changes == [], "\n".join(takeover.changes)
    assert takeover.finished_by_cut_worker == 0
    assert (cut.pid, cut.generation) == pids_before and cut.alive, "w1 was restarted"
    assert back_after is not None, f"w1 completed no new step {BACK_TO_WORK_BOUND:.0f} s later"
    assert doubles == []
    assert effects.missing == [] and effects.unknown == []
    assert counts == {"COMPLETED/COMPLETED": STREAM + len(fresh)}


@pytest.mark.timeout(1200)
def test_partitioned_worker_host_is_taken_over_and_its_late_writes_are_refused(cluster, figures):
    figures.scenario("2", "A worker host partitioned from the database (link down)")
    run_partition(cluster.start(), figures)
