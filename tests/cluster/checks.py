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


# --- lease epochs, from what the handlers did -----------------------------------------------
# A step's ``command_id`` is ``<effect id>:<attempt>:<lease epoch>`` and each effect the test
# workflows make carries it with the process's pid (the recorder keeps both), so the
# recorder knows under which epoch, and in which process, every handler acted. A claim gives
# a run's next epoch to one process; two processes acting under one (run, epoch) is an epoch
# issued twice.


def _epoch(call: Any) -> int | None:
    command = str(call.body.get("command_id") or "")
    tail = command.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def epochs_issued_twice(recorder: Any) -> dict[str, list[int]]:
    """``run:epoch`` → the pids that acted under it, where there were several."""
    pids: dict[str, set[int]] = collections.defaultdict(set)
    for call in list(recorder.calls):
        epoch = _epoch(call)
        if epoch is not None and call.body.get("run_id"):
            pids[f"{call.body['run_id']}:{epoch}"].add(int(call.body.get("pid") or 0))
    return {key: sorted(found) for key, found in pids.items() if len(found) > 1}


def epochs_acted_on_before_and_after(recorder: Any, at: float) -> list[str]:
    """``run:epoch`` under which handlers acted both before and after ``at`` (the recorder's
    clock, ``time.monotonic``): where nothing of the run was in flight at ``at``, its epoch
    was issued again after it."""
    sides: dict[str, set[bool]] = collections.defaultdict(set)
    for call in list(recorder.calls):
        epoch = _epoch(call)
        if epoch is not None and call.body.get("run_id"):
            sides[f"{call.body['run_id']}:{epoch}"].add(call.at > at)
    return sorted(key for key, found in sides.items() if len(found) == 2)


def journal_epochs_with_two_writers(engine: Engine) -> list[dict[str, Any]]:
    """(run, lease epoch) whose SUCCEEDED journal entries name more than one worker: what
    PostgreSQL kept of an epoch issued twice."""
    writers: dict[tuple[str, int], set[str]] = collections.defaultdict(set)
    for entry in checks.succeeded_entries(engine):
        if entry["lease_epoch"] is not None:
            writers[(entry["run_id"], entry["lease_epoch"])].add(entry["worker_id"] or "")
    return [
        {"run_id": run_id, "lease_epoch": epoch, "workers": sorted(found)}
        for (run_id, epoch), found in writers.items()
        if len(found) > 1
    ]


def overlapping_handlers(recorder: Any) -> list[str]:
    """Runs where handlers of two epochs acted at once: an effect of an older epoch reached
    the recorder after the first effect of a newer one (the recorder's clock)."""
    spans: dict[str, dict[int, list[float]]] = collections.defaultdict(dict)
    for call in list(recorder.calls):
        epoch = _epoch(call)
        run_id = call.body.get("run_id")
        if epoch is None or not run_id:
            continue
        span = spans[run_id].setdefault(epoch, [call.at, call.at])
        span[0], span[1] = min(span[0], call.at), max(span[1], call.at)
    found = []
    for run_id, by_epoch in spans.items():
        ordered = sorted(by_epoch.items())
        for (_older, (_, older_end)), (_newer, (newer_start, _)) in zip(
            ordered, ordered[1:], strict=False
        ):
            if older_end > newer_start:
                found.append(run_id)
                break
    return found
