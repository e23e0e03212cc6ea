"""What the cluster scenarios read from PostgreSQL besides the chaos suite's checks
(:mod:`tests.chaos.checks`): which host did the work. A ``worker_id`` starts with the
hostname of the process that wrote it, and each cluster host has its own."""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine

from tests.chaos import checks
from tests.chaos.providers import Delivery, Provider, api_event


def host_of(worker_id: str | None) -> str:
    return (worker_id or "").split(":", 1)[0]


def runs_by_host(engine: Engine, run_ids: Iterable[str] | None = None) -> dict[str, int]:
    """Runs per host of the worker that completed them (their last step's writer)."""
    ids = None if run_ids is None else set(run_ids)
    last = {}
    for entry in checks.succeeded_entries(engine):
        wanted = ids is None or entry["run_id"] in ids
        if wanted and entry["phase"] == "forward" and entry["step"] == "report":
            last[entry["run_id"]] = host_of(entry["worker_id"])
    return dict(sorted(collections.Counter(last.values()).items()))


def steps_by_host(engine: Engine, run_ids: Iterable[str] | None = None) -> dict[str, int]:
    """SUCCEEDED journal entries per host of their writer."""
    ids = None if run_ids is None else set(run_ids)
    counts = collections.Counter(
        host_of(e["worker_id"])
        for e in checks.succeeded_entries(engine)
        if ids is None or e["run_id"] in ids
    )
    return dict(sorted(counts.items()))


def claims_by_host(engine: Engine) -> dict[str, int]:
    """Claims (``lease`` events of a claim) per host of the claiming worker."""
    counts = collections.Counter(
        host_of(r["worker"])
        for r in checks.rows(
            engine,
            "SELECT actor AS worker FROM awooop_run_event"
            " WHERE kind = 'lease' AND trigger_id LIKE 'claim:%'",
        )
    )
    return dict(sorted(counts.items()))


def back_to_work(
    stack: Any, provider: Provider, host: str, since: float, bound: float
) -> tuple[list[Delivery], float | None]:
    """Deliver new runs, four at a time, until ``host`` completed a step of one; returns the
    deliveries and how long after ``since`` that was (None: not within ``bound``)."""
    fresh: list[Delivery] = []
    while time.monotonic() < since + bound:
        batch = [api_event(stack.project, stack.new_key("after"), {}) for _ in range(4)]
        provider.deliver_all(batch)
        fresh += batch
        if steps_by_host(stack.engine, [d.run_id for d in fresh]).get(host):
            return fresh, time.monotonic() - since
        time.sleep(0.5)
    return fresh, None
