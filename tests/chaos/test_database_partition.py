"""Scenario 5 — a database that stops answering one worker.

``worker-b`` reaches PostgreSQL through a :class:`~tests.support.netproxy.FaultProxy`.
While it is in the middle of slow steps, the proxy stops forwarding — on every connection,
open or new, and without closing any (no RST, no FIN: what a network partition looks like;
the kernel still acknowledges what the worker sends). The partition lasts longer than the
lease, until ``worker-a`` has taken over and finished every run ``worker-b`` held.

Everything those runs are in PostgreSQL is snapshotted; then the proxy forwards again, and
the statements ``worker-b`` wrote meanwhile — renewals, journal writes, completions — reach
the server late. Once it has had time to try (it reports each of those runs lost, or the
deadline passes), the snapshot must be unchanged: all its late writes were refused. No step
completed twice; every effect a journal shows was recorded once under its effect id (a
repeat from the stalled handler is deduplicated by the key, reported). Then ``worker-b``
must carry on with new work.
"""

from __future__ import annotations

import collections
import re

import pytest

from tests.chaos import checks
from tests.chaos.providers import api_event
from tests.chaos.stack import LEASE_TTL, REAPER_INTERVAL
from tests.chaos.takeover import cut_mid_stream

STREAM = 200  # runs delivered as fast as the web takes them: both workers stay busy
SLOW_SHARE = 10  # one run in ten has a 1.5 s step
NEW_RUNS = 24


def statement_kind(sql: str) -> str:
    """``EXECUTE awooop_renew`` / ``PREPARE awooop_claim`` / ``UPDATE awooop_run_state``…
    (a connection's periodic ``DISCARD PLANS;`` before the statement is not its kind)."""
    sql = re.sub(r"^\s*DISCARD PLANS;", "", sql)
    match = re.match(r"\s*(EXECUTE|PREPARE)\s+(\w+)|\s*(\w+)(?:\s+(?:INTO|FROM)?\s*(\w+))?", sql)
    if match is None:
        return sql[:40]
    if match.group(1):
        return f"{match.group(1)} {match.group(2)}"
    return " ".join(filter(None, [match.group(3), match.group(4)]))


@pytest.mark.timeout(600)
def test_partitioned_worker_is_taken_over_and_its_late_writes_are_refused(chaos_stack, figures):
    figures.scenario("5", "A database that stops answering one worker (TCP partition)")
    stack = chaos_stack.start(proxied=("worker-b",))
    stalled, other = stack.worker("worker-b"), stack.worker("worker-a")
    proxy = stalled.proxy
    assert proxy is not None
    provider = stack.provider(threads=4, redelivery_share=0.0)

    # Given worker-b in the middle of a stream of runs, when PostgreSQL stops answering it
    # (every connection, open or new) past the lease, then once it forwards again its late
    # statements reach the server and every write among them is refused
    takeover = cut_mid_stream(
        stack,
        stalled,
        provider,
        proxy.partition,
        proxy.heal,
        runs=STREAM,
        recovery_bound=LEASE_TTL + REAPER_INTERVAL + 60,
        slow_share=SLOW_SHARE,
        tried=lambda: proxy.late_bytes > 0,
    )
    late_kinds = collections.Counter(statement_kind(q) for q in proxy.late_statements)

    # And worker-b carries on with new work
    fresh = [api_event(stack.project, stack.new_key("after"), {}) for _ in range(NEW_RUNS)]
    provider.deliver_all(fresh)
    fresh_ids = [d.run_id for d in fresh]
    checks.wait_terminal(stack.engine, fresh_ids, 90)
    by_stalled = checks.steps_by_worker(stack.engine, stalled.worker_id_prefixes(), fresh_ids)
    by_other = checks.steps_by_worker(stack.engine, other.worker_id_prefixes(), fresh_ids)
    doubles = checks.double_completions(stack.engine)
    effects = checks.effects(stack.engine, stack.recorder)
    counts = checks.status_counts(stack.engine)

    figures.update(
        {
            "runs": STREAM + NEW_RUNS,
            "runs_held_when_partitioned": len(takeover.held),
            "partition_s": round(takeover.cut_s, 1),
            "held_runs_finished_by_the_other_worker_after_s": round(takeover.taken_over_in, 1),
            "held_runs_finished_by_the_partitioned_worker": takeover.finished_by_cut_worker,
            "connections_opened_during_partition": proxy.opened_during_partition,
            "late_connections_delivering_after_heal": len(proxy.late_links),
            "late_bytes_delivered_after_heal": proxy.late_bytes,
            "late_statements_delivered_after_heal": len(proxy.late_statements),
            "late_statements_by_kind": dict(late_kinds.most_common()),
            "worker_noticed_lost_leases_after_heal_s": takeover.noticed_in,
            "fields_changed_after_heal": len(takeover.changes),
            "late_effects_at_recorder_deduplicated": takeover.late_effects,
            "new_runs_after_heal": NEW_RUNS,
            "new_run_steps_by_the_healed_worker": by_stalled,
            "new_run_steps_by_the_other_worker": by_other,
            "runs_by_status": counts,
            "steps_completed_twice": len(doubles),
            **provider.figures(),
            **effects.figures,
        }
    )

    assert takeover.changes == [], "\n".join(takeover.changes)
    assert takeover.finished_by_cut_worker == 0
    assert proxy.late_bytes > 0, "nothing worker-b wrote during the partition reached the server"
    assert by_stalled > 0, "the healed worker completed no step of the new runs"
    assert doubles == []
    assert effects.missing == [] and effects.unknown == []
    assert counts == {"COMPLETED/COMPLETED": STREAM + NEW_RUNS}
