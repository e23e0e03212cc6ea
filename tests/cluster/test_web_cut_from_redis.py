"""Cluster scenario 4 — the web host cut from Redis after its commits.

gunicorn on ``web`` reaches Redis (the broker, and the rate limiter) through a proxy of its
own. The proxy stops forwarding (a partition between ``web`` and Redis only) while events
keep arriving: admission commits each event's run in PostgreSQL, then cannot send its
message. The design (a message is a nudge sent after commit; a lost one is re-sent by the
orphan sweep) says admission still answers **202** for a committed event, promptly: the
provider gets its answer, with no 5xx. The orphan sweep on ``ops`` (which reaches Redis)
then sends every committed run, and the workers complete them: none lost.

Figures: admission latency during the cut, how long the orphan sweep took to get every run
sent, and the whole recovery.
"""

from __future__ import annotations

import time

import pytest

from tests.chaos import checks
from tests.chaos.providers import api_event
from tests.chaos.stack import TIMINGS
from tests.cluster.suite import SUITE

BEFORE = SUITE.scaled(50, least=20)
DURING = SUITE.scaled(500, least=60)
AFTER = SUITE.scaled(50, least=20)
ORPHAN_AFTER = float(TIMINGS["AWOOOP_ORPHAN_AFTER_SECONDS"])
ORPHAN_INTERVAL = float(TIMINGS["AWOOOP_ORPHAN_INTERVAL_SECONDS"])
# A committed event is answered within this long while the broker cannot be reached.
ANSWER_BOUND = 5.0


def _events(stack, prefix: str, n: int) -> list:
    return [api_event(stack.project, stack.new_key(prefix), {}) for _ in range(n)]


@pytest.mark.timeout(900)
def test_web_cut_from_redis_answers_committed_events_and_the_orphan_sweep_sends_them(
    cluster, figures
):
    figures.scenario("4", "The web host cut from Redis after its commits")
    links = cluster.links("redis")
    stack = cluster.start(env={"web": links.env})

    # Given admission working end to end
    before = stack.provider(threads=8, redelivery_share=0.0).deliver_all(
        _events(stack, "before", BEFORE)
    )
    checks.wait_terminal(stack.engine, [d.run_id for d in before], 120)

    # When the web host is cut from Redis while events keep arriving
    links.partition()
    cut_at = time.monotonic()
    during_provider = stack.provider(threads=8, redelivery_share=0.1, timeout=30)
    during = during_provider.deliver_all(_events(stack, "during", DURING))
    admitted_s = time.monotonic() - cut_at
    during_ids = [d.run_id for d in during]

    # Then each committed event was answered promptly, and the orphan sweep sends them all
    assert all(during_ids), "an event admitted during the cut got no run"
    sent_in = checks.wait_terminal(stack.engine, during_ids, 300)
    all_done_s = time.monotonic() - cut_at
    links.heal()
    after_provider = stack.provider(threads=8, redelivery_share=0.0)
    after = after_provider.deliver_all(_events(stack, "after", AFTER))
    checks.wait_terminal(stack.engine, [d.run_id for d in after], 120)

    doubles = checks.double_completions(stack.engine)
    effects = checks.effects(stack.engine, stack.recorder)
    counts = checks.status_counts(stack.engine)
    total = BEFORE + DURING + AFTER
    during_figures = during_provider.figures()
    figures.update(
        {
            "runs": total,
            "events_during_cut": DURING,
            "admission_during_cut_s": round(admitted_s, 1),
            "during_cut_http_answers": during_figures["http_answers"],
            "during_cut_provider_retries": during_figures["provider_retries"],
            "during_cut_connection_errors": during_figures["connection_errors"],
            "during_cut_admission_p50_ms": during_figures["admission_p50_ms"],
            "during_cut_admission_p99_ms": during_figures["admission_p99_ms"],
            "orphan_after_s": ORPHAN_AFTER,
            "orphan_interval_s": ORPHAN_INTERVAL,
            "runs_admitted_during_cut_done_after_last_answer_s": round(sent_in, 1),
            "all_done_after_cut_s": round(all_done_s, 1),
            "runs_by_status": counts,
            "attempts_histogram": checks.attempts_histogram(stack.engine),
            "steps_completed_twice": len(doubles),
            **effects.figures,
        }
    )

    assert during_figures["http_5xx"] == 0 and during_figures["connection_errors"] == 0
    assert set(during_figures["http_answers"]) <= {200, 202}
    assert during_provider.redelivery_mismatches == [] and during_provider.gave_up == []
    assert during_figures["admission_p99_ms"] <= ANSWER_BOUND * 1000
    assert len(set(during_ids)) == DURING
    assert doubles == []
    assert effects.missing == [] and effects.unknown == []
    assert counts == {"COMPLETED/COMPLETED": total}
