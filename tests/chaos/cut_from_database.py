"""A worker cut from PostgreSQL only while a cooperative handler acts: its handler must have
stopped acting before another worker's handler starts on the same run.

:func:`cut_while_acting` is what chaos scenarios 9 and 10 and cluster scenario 8 share. The
runs are of ``chaos-cooperative`` (:mod:`tests.chaos.workflows`): a step that, for
``act_for`` seconds, reads ``ctx.lease_held`` before each side effect and makes one at the
recorder while it reads true. Every side effect is timed by the recorder, on the test
process's clock, so the order of two processes' acts is read from what they did, not from
when the test slept.

The cut worker holds two such runs, its handlers acting; the other worker is started and
idle (so nothing but the take-over delays its handler). Then the cut worker's link to
PostgreSQL stops forwarding — only that link: the recorder and Redis still answer it — and,
in the second variant, PostgreSQL restarts during the cut. For each run it held: the cut
worker's last act must come before the other worker's first act on that run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.chaos import checks, workflows
from tests.chaos.providers import api_event
from tests.chaos.stack import (
    HEARTBEAT_INTERVAL,
    LEASE_TTL,
    REAPER_INTERVAL,
    TIMINGS,
    WORKER_DEAD_AFTER,
    ChaosStack,
    Worker,
)
from tests.support import timings
from tests.support.processes import wait_until

RUNS = 2  # as many as the cut worker's pool: it holds both
# Long enough that the cut worker would still be acting well past any rule's belief, and
# the other worker's handler would have started, whatever the take-over path.
ACT_FOR = 2 * LEASE_TTL
TICK = 0.2
TAKEN_OVER_BOUND = LEASE_TTL + REAPER_INTERVAL + ACT_FOR + 60


@dataclass
class RunActs:
    run_id: str
    by_cut: list[float]  # when the cut worker acted, seconds from the cut
    by_other: list[float]  # when the other worker acted, seconds from the cut

    @property
    def cut_last(self) -> float | None:
        return max(self.by_cut, default=None)

    @property
    def other_first(self) -> float | None:
        return min(self.by_other, default=None)

    @property
    def overlap(self) -> float:
        """How long both handlers acted on the run (0: one after the other)."""
        if self.cut_last is None or self.other_first is None:
            return 0.0
        return max(0.0, self.cut_last - self.other_first)

    @property
    def cut_acts_after_other_first(self) -> int:
        first = self.other_first
        return 0 if first is None else sum(at >= first for at in self.by_cut)


def _acts(stack: ChaosStack, run_id: str, worker: Worker, since: float) -> list[float]:
    pids = {int(p.split(":")[1]) for p in worker.worker_id_prefixes()}
    return [
        c.at - since
        for c in stack.recorder.calls_of(run_id, workflows.TICK)
        if c.body.get("pid") in pids
    ]


def cut_while_acting(
    stack: ChaosStack,
    cut: Worker,
    start_other: Callable[[], Worker],
    partition: Callable[[], None],
    heal: Callable[[], None],
    figures: dict[str, Any],
    restart: Callable[[], float] | None = None,
) -> list[RunActs]:
    """The scenario on a stack where only ``cut`` runs (its database link through the proxy
    ``partition`` / ``heal`` act on); ``start_other()`` starts the second worker and returns
    it once ready; ``restart()`` restarts PostgreSQL during the cut and returns how long it
    was down. Fills ``figures`` and asserts."""
    stack.route(api=workflows.COOPERATIVE_NAME)
    provider = stack.provider(threads=2, redelivery_share=0.0)
    payload = {"act_for": ACT_FOR, "tick": TICK}
    deliveries = [api_event(stack.project, stack.new_key("act"), payload) for _ in range(RUNS)]
    provider.deliver_all(deliveries)
    run_ids = [d.run_id for d in deliveries]
    assert None not in run_ids

    # Given the cut worker holding the runs, its handlers acting, and an idle second worker
    stack.wait_holding(cut, RUNS)
    wait_until(
        lambda: all(_acts(stack, r, cut, 0.0) for r in run_ids),
        60,
        f"{cut.name}'s handlers to act",
    )
    other = start_other()

    # When the cut worker's link to PostgreSQL stops forwarding (and PostgreSQL restarts)
    partition()
    cut_at = time.monotonic()
    held = checks.held_by(stack.engine, cut.worker_id_prefixes())
    down_s = None
    if restart is not None:
        down_s = restart()
        stack.engine.dispose()  # its pooled connections died with the server

    # Then every run is finished by the other worker, and the cut worker's handlers have
    # ended (each acts for ACT_FOR at most, from its first act)
    taken_over_s = checks.wait_terminal(stack.engine, run_ids, TAKEN_OVER_BOUND)
    handlers_end = max(min(_acts(stack, r, cut, 0.0)) for r in run_ids) + ACT_FOR + 10 * TICK
    wait_until(lambda: time.monotonic() > handlers_end, ACT_FOR + 60, "the cut handlers' end")
    acts = [RunActs(r, _acts(stack, r, cut, cut_at), _acts(stack, r, other, cut_at)) for r in held]
    every_act = [c for r in run_ids for c in stack.recorder.calls_of(r, workflows.TICK)]
    known = {int(p.split(":")[1]) for w in (cut, other) for p in w.worker_id_prefixes()}
    unattributed = sum(c.body.get("pid") not in known for c in every_act)

    # And once the link is back, nothing was lost or done twice
    heal()
    checks.wait_terminal(stack.engine, None, 60)
    doubles = checks.double_completions(stack.engine)
    effects = checks.effects(stack.engine, stack.recorder)
    counts = checks.status_counts(stack.engine)

    def worst(values: list[float | None], pick: Callable[..., float]) -> float | None:
        found = [v for v in values if v is not None]
        return round(pick(found), 1) if found else None

    figures.update(
        {
            "runs": RUNS,
            "runs_held_by_the_cut_worker": len(held),
            "timings": {
                "lease_ttl_s": LEASE_TTL,
                "heartbeat_s": HEARTBEAT_INTERVAL,
                "worker_liveness_s": timings.seconds(TIMINGS, "worker_liveness_interval_seconds"),
                "worker_dead_after_s": WORKER_DEAD_AFTER,
                "worker_belief_margin_s": timings.seconds(TIMINGS, "worker_belief_margin_seconds"),
                "reaper_s": REAPER_INTERVAL,
            },
            "handler_acts_for_s": ACT_FOR,
            "handler_acts_every_s": TICK,
            "postgres_down_during_cut_s": down_s and round(down_s, 1),
            "cut_to_cut_worker_last_effect_s": worst([a.cut_last for a in acts], max),
            "cut_to_other_worker_first_effect_s": worst([a.other_first for a in acts], min),
            "both_handlers_acting_s": worst([a.overlap for a in acts], max),
            "cut_worker_effects_after_the_other_workers_first": sum(
                a.cut_acts_after_other_first for a in acts
            ),
            "held_runs_terminal_after_cut_s": round(taken_over_s, 1),
            "effects_by_an_unknown_process": unattributed,
            "runs_by_status": counts,
            "steps_completed_twice": len(doubles),
            **effects.figures,
        }
    )

    assert sorted(held) == sorted(run_ids), f"{cut.name} held {held} of {run_ids} when cut"
    assert unattributed == 0
    for a in acts:
        assert a.by_cut and a.by_other, f"run {a.run_id}: acts by each worker {a}"
        assert a.cut_last is not None and a.other_first is not None
        assert a.cut_last < a.other_first, (
            f"run {a.run_id}: {cut.name} acted until {a.cut_last:.1f} s after the cut, "
            f"{other.name} from {a.other_first:.1f} s: both acted for {a.overlap:.1f} s"
        )
    assert doubles == []
    assert effects.missing == [] and effects.unknown == []
    assert counts == {"COMPLETED/COMPLETED": RUNS}
    return acts
