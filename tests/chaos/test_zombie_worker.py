"""Scenario 2 — a zombie worker: SIGSTOPped while it holds runs, SIGCONTed after others
finished them.

A worker (parent and pool, the whole process group) is stopped in the middle of slow steps.
It stays stopped past lease + reaper, until the other worker has finished every run it
held. Everything those runs are in PostgreSQL — status, saga status, journal, version,
lease epoch, worker, audit events — is snapshotted; then the zombie is resumed, and once it
has had time to try (each run it held shows up in its ``lease_lost`` log lines, or the
deadline passes), the snapshot must be unchanged: none of its writes was accepted. Its
handlers may still have made their effect downstream (at-least-once): the recorder must
have seen it under the same effect id (a repeat the downstream deduplicates), reported.

Then it must carry on: new runs are admitted and it completes some of them (journal
entries under its worker ids).
"""

from __future__ import annotations

import time

import pytest

from tests.chaos import checks
from tests.chaos.providers import api_event
from tests.chaos.stack import LEASE_TTL, REAPER_INTERVAL
from tests.support.processes import wait_until

SLOW_RUNS = 6
SLOW_SECONDS = 5.0
NEW_RUNS = 24


@pytest.mark.timeout(600)
def test_sigstopped_worker_writes_nothing_after_sigcont_and_carries_on(chaos_stack, figures):
    figures.scenario("2", "Zombie worker (SIGSTOP / SIGCONT)")
    stack = chaos_stack.start()
    zombie, other = stack.worker("worker-b"), stack.worker("worker-a")
    provider = stack.provider(threads=4, redelivery_share=0.0)

    # Given the zombie in the middle of slow steps
    slow = [
        api_event(stack.project, stack.new_key("slow"), {"slow": SLOW_SECONDS})
        for _ in range(SLOW_RUNS)
    ]
    provider.deliver_all(slow)
    stack.wait_holding(zombie, 2, timeout=30)
    time.sleep(1.0)  # into the slow step

    # When it is stopped until the others have finished all it held
    zombie.freeze()
    frozen_at = time.monotonic()
    held = checks.held_by(stack.engine, zombie.worker_id_prefixes())
    assert held, "the zombie held no run when it was stopped"
    all_runs = [d.run_id for d in slow]
    taken_over_in = checks.wait_terminal(stack.engine, held, LEASE_TTL + REAPER_INTERVAL + 60)
    checks.wait_terminal(stack.engine, all_runs, 60)
    # Stopped at least past lease + reaper, whatever the order above.
    time.sleep(max(0.0, frozen_at + LEASE_TTL + REAPER_INTERVAL - time.monotonic()))
    before = checks.snapshot(stack.engine, all_runs)
    finishers = {
        e["worker_id"]
        for e in checks.succeeded_entries(stack.engine)
        if e["run_id"] in held and e["step"] == "report"
    }
    frozen_for = time.monotonic() - frozen_at
    zombie.thaw()
    thawed_at = time.monotonic()

    # Then, once it has had time to try, none of its writes was accepted
    def tried_all() -> bool:
        lost = {r.get("run_id") for r in zombie.actions("lease_lost")}
        return set(held) <= lost

    try:
        wait_until(tried_all, 30, "the zombie to notice it lost every lease")
        noticed_in = round(time.monotonic() - thawed_at, 1)
    except AssertionError:
        noticed_in = None
    time.sleep(1.0)  # a write it still had in flight lands (or not) now
    after = checks.snapshot(stack.engine, all_runs)
    changes = checks.changed(before, after)
    late_effects = {
        k: n for k, n in stack.recorder.repeated().items() if k.split(":", 1)[0] in held
    }

    # And it carries on with new work
    fresh = [
        api_event(stack.project, stack.new_key("after"), {"slow": 0.5}) for _ in range(NEW_RUNS)
    ]
    provider.deliver_all(fresh)
    fresh_ids = [d.run_id for d in fresh]
    checks.wait_terminal(stack.engine, fresh_ids, 90)
    by_zombie = checks.steps_by_worker(stack.engine, zombie.worker_id_prefixes(), fresh_ids)
    by_other = checks.steps_by_worker(stack.engine, other.worker_id_prefixes(), fresh_ids)
    doubles = checks.double_completions(stack.engine)
    effects = checks.effects(stack.engine, stack.recorder)

    figures.update(
        {
            "runs_held_when_stopped": len(held),
            "stopped_for_s": round(frozen_for, 1),
            "held_runs_finished_by_others_after_s": round(taken_over_in, 1),
            "held_runs_finished_by_the_zombie": sum(zombie.owns(w) for w in finishers),
            "zombie_noticed_lost_leases_after_s": noticed_in,
            "fields_changed_after_sigcont": len(changes),
            "late_effects_at_recorder_deduplicated": len(late_effects),
            "new_runs": NEW_RUNS,
            "new_run_steps_by_the_resumed_worker": by_zombie,
            "new_run_steps_by_the_other_worker": by_other,
            "runs_by_status": checks.status_counts(stack.engine),
            "steps_completed_twice": len(doubles),
            **effects.figures,
        }
    )

    assert changes == [], "\n".join(changes)
    assert not any(zombie.owns(w) for w in finishers)
    assert by_zombie > 0, "the resumed worker completed no step of the new runs"
    assert doubles == []
    assert effects.missing == [] and effects.unknown == []
    assert checks.status_counts(stack.engine) == {"COMPLETED/COMPLETED": SLOW_RUNS + NEW_RUNS}
