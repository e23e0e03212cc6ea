"""Whether the database could lose committed transactions on a failover: checked once when a
process starts (web, worker, beat, ``awooop migrate``).

AwoooP's guarantees rest on what PostgreSQL has committed: an admitted event is answered 202
once its run is committed, and a lease epoch fences a worker once the claim that raised it is
committed. A primary that streams to standbys asynchronously acknowledges a commit before any
standby has it; promote one of those standbys and the commits it had not received are gone.
The new primary then admits the same event again (its dedupe row is gone), or issues the
same lease epoch a second time — and two workers hold one run with the same epoch, so the
fencing that keeps them from both acting on one step is gone.

The verdict (:func:`judge`) is one of

- ``safe``: no standby streams from the database, or commits wait for a synchronous one;
- ``at_risk``: standbys are attached and commits wait for none of them
  (``synchronous_standby_names`` empty, every standby ``async``/``potential``, or
  ``synchronous_commit`` ``off``/``local``);
- ``unknown``: the role may not read the standbys' state, or the database did not answer;
- ``standby``: the database is itself a standby (read-only), so no write would succeed.

``AWOOOP_DATABASE_FAILOVER_CHECK`` says what a starting process does with ``at_risk``: log a
warning (``warn``, the default), refuse to start (``refuse``), or not check (``off``: for a
deployment whose asynchronous standbys are never promoted, e.g. reporting replicas). Nothing
else stops a start: a database that does not answer, or a role that may not see the
standbys, is logged as not checked.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from awooop import db
from awooop.config import Settings
from awooop.store import replication

log = logging.getLogger("awooop.failover")

SAFE = "safe"
AT_RISK = "at_risk"
UNKNOWN = "unknown"
STANDBY = "standby"

# The sync_state of a standby whose flush a commit waits for.
SYNCHRONOUS_STATES = frozenset({"sync", "quorum"})
# synchronous_commit values under which a commit waits for no standby.
LOCAL_COMMITS = frozenset({"off", "local"})

# The settings value that turns an at-risk verdict into a refusal to start.
REFUSE = "refuse"
OFF = "off"

_WHAT_IS_LOST = (
    "a failover to one of them loses the commits it had not yet received: events already "
    "acknowledged (answered 202) are gone, and lease epochs are issued again, so two "
    "workers could act on one step"
)
_WHAT_TO_DO = (
    "configure synchronous replication (Patroni: synchronous_mode: true; plain PostgreSQL: "
    "synchronous_standby_names and synchronous_commit = on), or set "
    "AWOOOP_DATABASE_FAILOVER_CHECK=off if these standbys are never promoted "
    "(docs/operations.md, High availability)"
)


@dataclass(frozen=True)
class Verdict:
    """What :func:`judge` found: ``state`` (:data:`SAFE`, :data:`AT_RISK`, :data:`UNKNOWN`
    or :data:`STANDBY`) and why, in words."""

    state: str
    reason: str


def judge(found: replication.Replication) -> Verdict:
    """Whether a database in the state ``found`` could lose committed transactions on a
    failover to one of its standbys."""
    if found.in_recovery:
        return Verdict(STANDBY, "the database is a standby (read-only): every write will fail")
    standbys = found.standbys
    if not standbys:
        return Verdict(SAFE, "no standby streams from the database")
    count = f"{len(standbys)} standby{'s' if len(standbys) > 1 else ''} attached"
    if found.synchronous_commit in LOCAL_COMMITS:
        return Verdict(
            AT_RISK,
            f"{count}, and synchronous_commit is {found.synchronous_commit}: commits wait "
            "for no standby",
        )
    if not found.synchronous_standby_names.strip():
        return Verdict(
            AT_RISK, f"{count}, and synchronous_standby_names is empty: all are asynchronous"
        )
    if any(s.sync_state is None for s in standbys):
        return Verdict(
            UNKNOWN,
            f"{count}, but this role may not read their sync_state in pg_stat_replication "
            "(grant it pg_monitor to have it checked)",
        )
    if not any(s.sync_state in SYNCHRONOUS_STATES for s in standbys):
        states = ", ".join(f"{s.name or '?'}: {s.sync_state}" for s in standbys)
        return Verdict(AT_RISK, f"{count} ({states}), none synchronous")
    return Verdict(SAFE, "commits wait for a synchronous standby")


def check(settings: Settings, process: str, engine: Engine | None = None) -> Verdict:
    """Read the database's replication once (on ``engine``, or a connection of its own) and
    log the verdict for ``process``: a WARNING when it is at risk, is a standby or could not
    be checked, an INFO line when it is safe."""
    own = engine is None
    if engine is None:
        engine = db.make_probe_engine(
            settings.database_url,
            settings.readiness_timeout_seconds,
            session_options=settings.database_session_options,
            application_name=f"awooop-{process}-start",
        )
    try:
        with engine.connect() as conn:
            verdict = judge(replication.read(conn))
    except sa_exc.DBAPIError as exc:
        # The class only: a driver's message could quote a URL.
        verdict = Verdict(UNKNOWN, f"the database did not answer ({type(exc.orig).__name__})")
    finally:
        if own:
            engine.dispose()
    _log(verdict, process)
    return verdict


def _log(verdict: Verdict, process: str) -> None:
    extra = {"action": f"database_failover_{verdict.state}", "role": process}
    if verdict.state == AT_RISK:
        log.warning(
            f"the database could lose committed transactions on failover: {verdict.reason}; "
            f"{_WHAT_IS_LOST}. To keep them, {_WHAT_TO_DO}",
            extra=extra,
        )
    elif verdict.state == UNKNOWN:
        log.warning(
            "could not check whether the database could lose committed transactions on "
            f"failover: {verdict.reason}",
            extra=extra,
        )
    elif verdict.state == STANDBY:
        log.warning(f"{verdict.reason}; point AWOOOP_DATABASE_URL at the primary", extra=extra)
    else:
        log.info(f"database failover check: {verdict.reason}", extra=extra)


def check_or_exit(settings: Settings, process: str) -> Verdict | None:
    """The start-up check of a process (web, worker, beat): :func:`check`, unless
    ``AWOOOP_DATABASE_FAILOVER_CHECK=off`` (None then). With ``refuse``, a database at risk
    ends the process here: one line on stderr, exit status 2."""
    if settings.database_failover_check == OFF:
        return None
    verdict = check(settings, process)
    if verdict.state == AT_RISK and settings.database_failover_check == REFUSE:
        print(
            f"awooop: {process}: the database could lose committed transactions on failover "
            f"({verdict.reason}); refusing to start (AWOOOP_DATABASE_FAILOVER_CHECK=refuse): "
            f"{_WHAT_TO_DO}",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(2)
    return verdict
