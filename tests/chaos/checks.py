"""What the scenarios assert, read from PostgreSQL and the recorder (never from logs).

- :func:`wait_terminal`: every run COMPLETED, FAILED or CANCELLED, within a bound;
- :func:`double_completions`: (run, step, phase) with more than one SUCCEEDED entry in the
  journal (``saga_steps``) — a step completed twice;
- :func:`effects`: every effect id the journals show SUCCEEDED for an effect step was
  recorded by the recorder, and the recorder saw no key no run made;
- :func:`snapshot`: what a zombie must not change (status, journal, version, lease, events).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, text

from tests.chaos import workflows
from tests.chaos.recorder import Recorder

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")


def rows(engine: Engine, sql: str, **params: Any) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(text(sql), params).mappings()]


def status_counts(engine: Engine) -> dict[str, int]:
    return {
        f"{r['status']}/{r['saga_status']}": r["n"]
        for r in rows(
            engine,
            "SELECT status, saga_status, count(*) AS n FROM awooop_run_state"
            " GROUP BY 1, 2 ORDER BY 1, 2",
        )
    }


def not_terminal(engine: Engine, run_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
    sql = (
        "SELECT run_id::text, status, saga_status, worker_id, attempt_count, lease_until"
        " FROM awooop_run_state WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')"
    )
    if run_ids is None:
        return rows(engine, sql)
    return rows(engine, sql + " AND run_id::text = ANY(:ids)", ids=list(run_ids))


def wait_terminal(
    engine: Engine, run_ids: Iterable[str] | None, timeout: float, poll: float = 0.25
) -> float:
    """Wait until every run (of ``run_ids``, or all) is terminal; returns the seconds it
    took. Fails after ``timeout`` naming the runs still going."""
    ids = None if run_ids is None else list(run_ids)
    started = time.monotonic()
    while True:
        left = not_terminal(engine, ids)
        if not left:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(
                f"{len(left)} runs not terminal {timeout:.0f} s later, e.g. "
                f"{[why_not_terminal(engine, r['run_id']) for r in left[:3]]}"
            )
        time.sleep(poll)


def why_not_terminal(engine: Engine, run_id: str) -> dict[str, Any]:
    """What a run still going looks like: its row as a claim or the orphan sweep reads it,
    the transactions open for more than 5 s (one may hold its row), and its history."""
    state = rows(
        engine,
        """
        SELECT run_id::text, status, saga_status, control_state, worker_id, attempt_count,
               lease_epoch, lease_until, available_at <= now() AS available,
               round(extract(epoch FROM now() - enqueued_at)::numeric, 1) AS sent_s_ago,
               reaped_at, jsonb_array_length(saga_steps) AS journal_length
        FROM awooop_run_state WHERE run_id::text = :id
        """,
        id=run_id,
    )
    # A session that stopped mid-transaction (its COMMIT lost in a partition) keeps its row
    # locks, and claims and the orphan sweep skip locked rows.
    stalled = rows(
        engine,
        """
        SELECT pid, application_name, client_port, state, left(query, 160) AS query,
               round(extract(epoch FROM now() - xact_start)::numeric, 1) AS xact_s
        FROM pg_stat_activity
        WHERE xact_start < now() - interval '5 seconds' AND pid <> pg_backend_pid()
        """,
    )
    events = rows(
        engine,
        "SELECT kind, from_status, to_status, trigger_id, actor, at::text"
        " FROM awooop_run_event WHERE run_id::text = :id ORDER BY seq",
        id=run_id,
    )
    return {"run": state, "long_transactions": stalled, "events": events}


def double_completions(engine: Engine) -> list[dict[str, Any]]:
    """(run, step, phase) recorded SUCCEEDED more than once in a journal."""
    return rows(
        engine,
        """
        SELECT r.run_id::text, e->>'step' AS step, e->>'phase' AS phase, count(*) AS n
        FROM awooop_run_state r, jsonb_array_elements(r.saga_steps) e
        WHERE e->>'status' = 'SUCCEEDED'
        GROUP BY 1, 2, 3 HAVING count(*) > 1
        """,
    )


def succeeded_entries(engine: Engine) -> list[dict[str, Any]]:
    return rows(
        engine,
        """
        SELECT r.run_id::text, e->>'step' AS step, e->>'phase' AS phase,
               e->>'effect_id' AS effect_id, e->>'worker_id' AS worker_id,
               (e->>'lease_epoch')::bigint AS lease_epoch
        FROM awooop_run_state r, jsonb_array_elements(r.saga_steps) e
        WHERE e->>'status' = 'SUCCEEDED'
        """,
    )


@dataclass
class EffectCheck:
    journal_effects: int  # SUCCEEDED effect-step entries in the journals
    missing: list[str]  # SUCCEEDED in a journal, never seen by the recorder
    unknown: list[str]  # seen by the recorder, no such run
    repeated: dict[str, int]  # keys the recorder saw more than once (deduplicated)
    figures: dict[str, Any]


def effects(engine: Engine, recorder: Recorder) -> EffectCheck:
    """Compare the journals' effect ids with what the recorder saw."""
    expected = set()
    for entry in succeeded_entries(engine):
        steps = (
            workflows.EFFECT_STEPS
            if entry["phase"] == "forward"
            else workflows.COMPENSATION_EFFECT_STEPS
        )
        if entry["step"] in steps:
            expected.add(entry["effect_id"])
    seen = recorder.keys()
    run_ids = {r["run_id"] for r in rows(engine, "SELECT run_id::text FROM awooop_run_state")}
    unknown = sorted(k for k in seen if k.split(":", 1)[0] not in run_ids)
    repeated = recorder.repeated()
    figures = {
        "journal_effects_succeeded": len(expected),
        **recorder.figures(),
        "effects_missing_at_recorder": len(expected - seen),
        "recorder_effects_not_in_any_journal": len(seen - expected),
    }
    return EffectCheck(len(expected), sorted(expected - seen), unknown, repeated, figures)


def snapshot(engine: Engine, run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Everything a fenced-out worker must not change, per run."""
    result = {}
    for r in rows(
        engine,
        """
        SELECT run_id::text, status, saga_status, version, lease_epoch, worker_id,
               attempt_count, lease_until, finished_at, updated_at, saga_steps::text AS journal,
               output::text AS output,
               (SELECT count(*) FROM awooop_run_event e WHERE e.run_id = r.run_id) AS events
        FROM awooop_run_state r WHERE run_id::text = ANY(:ids)
        """,
        ids=list(run_ids),
    ):
        result[r.pop("run_id")] = r
    return result


def changed(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[str]:
    """What differs between two snapshots, one line per field."""
    lines = []
    for run_id, old in before.items():
        new = after.get(run_id, {})
        for name, value in old.items():
            if new.get(name) != value:
                lines.append(f"{run_id}.{name}: {value!r} -> {new.get(name)!r}")
    return lines


def held_by(engine: Engine, prefixes: list[str]) -> list[str]:
    """RUNNING runs whose lease is held by a worker id starting with one of ``prefixes``."""
    if not prefixes:
        return []
    return [
        r["run_id"]
        for r in rows(
            engine,
            "SELECT run_id::text FROM awooop_run_state WHERE status = 'RUNNING'"
            " AND worker_id LIKE ANY(:patterns)",
            patterns=[p + "%" for p in prefixes],
        )
    ]


def steps_by_worker(engine: Engine, prefixes: list[str], run_ids: Iterable[str]) -> int:
    """SUCCEEDED journal entries of these runs written under one of these worker ids."""
    entries = [
        e
        for e in succeeded_entries(engine)
        if e["run_id"] in set(run_ids)
        and any((e["worker_id"] or "").startswith(p) for p in prefixes)
    ]
    return len(entries)


def attempts_histogram(engine: Engine) -> dict[int, int]:
    counts = collections.Counter(
        r["attempt_count"] for r in rows(engine, "SELECT attempt_count FROM awooop_run_state")
    )
    return dict(sorted(counts.items()))


def db_now(engine: Engine) -> Any:
    with engine.connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one()


# --- timers (scenario 6) -----------------------------------------------------------------

_TIMER_AUDIT = """
CREATE TABLE chaos_timer_audit (
    seq bigserial PRIMARY KEY,
    timer_id text NOT NULL,
    old_state text,
    new_state text,
    claimed_by text,
    txid bigint NOT NULL DEFAULT txid_current(),
    xact_at timestamptz NOT NULL DEFAULT now(),
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION chaos_timer_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_timer_audit (timer_id, old_state, new_state, claimed_by)
    VALUES (NEW.timer_id, OLD.state, NEW.state, NEW.claimed_by);
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_timer_audit AFTER UPDATE ON awooop_timer FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.claimed_by IS DISTINCT FROM NEW.claimed_by
          OR OLD.fired_at IS DISTINCT FROM NEW.fired_at)
    EXECUTE FUNCTION chaos_timer_audit();
"""


def install_timer_audit(engine: Engine) -> None:
    """A trigger recording, in PostgreSQL, every change of a timer's state, sweeper or
    firing time (``chaos_timer_audit``): a timer fired twice is two rows, even if the second
    firing wrote the same values."""
    with engine.begin() as conn:
        conn.exec_driver_sql(_TIMER_AUDIT)


def timer_firings(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    """Per timer id, its audited changes, oldest first."""
    found: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rows(engine, "SELECT * FROM chaos_timer_audit ORDER BY seq"):
        found[r["timer_id"]].append(r)
    return dict(found)


def overlapping_sweeps(firings: dict[str, list[dict[str, Any]]]) -> int:
    """Pairs of sweep transactions of different processes that fired timers while both were
    open (from the audit's transaction start and last change): sweeps that really ran at
    the same time, not one after the other."""
    spans: dict[int, list[Any]] = {}
    for changes in firings.values():
        for c in changes:
            span = spans.setdefault(c["txid"], [c["claimed_by"], c["xact_at"], c["at"]])
            span[2] = max(span[2], c["at"])
    ordered = sorted(spans.values(), key=lambda s: s[1])
    pairs = 0
    for i, (who, _start, end) in enumerate(ordered):
        for other, other_start, _ in ordered[i + 1 :]:
            if other_start > end:
                break
            if other != who:
                pairs += 1
    return pairs


def duplicate_journal_entries(engine: Engine) -> list[dict[str, Any]]:
    """(run, phase, step, attempt) recorded more than once in a journal. A resolved forward
    attempt is recorded twice by design — UNKNOWN, then its settled outcome with
    ``resolved: true`` — so the settled entry is its own key."""
    return rows(
        engine,
        """
        SELECT r.run_id::text, e->>'phase' AS phase, e->>'step' AS step,
               e->>'attempt' AS attempt, coalesce(e->>'resolved', 'false') AS resolved,
               count(*) AS n, jsonb_agg(e->>'status') AS statuses
        FROM awooop_run_state r, jsonb_array_elements(r.saga_steps) e
        WHERE e->>'phase' IN ('forward', 'compensate', 'resolve')
        GROUP BY 1, 2, 3, 4, 5 HAVING count(*) > 1
        """,
    )


def claims_per_run(engine: Engine) -> dict[str, int]:
    """Claims of each run (its ``lease`` events triggered ``claim:<epoch>``)."""
    return {
        r["run_id"]: r["n"]
        for r in rows(
            engine,
            "SELECT run_id::text, count(*) AS n FROM awooop_run_event"
            " WHERE kind = 'lease' AND trigger_id LIKE 'claim:%' GROUP BY 1",
        )
    }


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[int(p * (len(ordered) - 1))] if ordered else 0.0
