"""Checks a worker makes when it starts."""

from __future__ import annotations

import logging

from sqlalchemy import Engine

from awooop.store import runs
from awooop.workflows import registry

log = logging.getLogger("awooop.engine.startup")


def missing_definitions(engine: Engine) -> list[dict[str, object]]:
    """Workflow definitions that unfinished runs use but this process does not have.

    Such runs are not failed: a worker that lacks their definition hands them back (another
    worker, e.g. of the previous release, may have it). This makes the gap loud at start-up
    instead of one log line per claim.
    """
    with engine.connect() as conn:
        used = runs.active_definitions(conn)
    missing = []
    for name, version, digest, count in used:
        try:
            known = registry.get(name, version).digest == digest
        except registry.UnknownWorkflow:
            known = False
        if not known:
            missing.append({"workflow": name, "version": version, "digest": digest, "runs": count})
    for entry in missing:
        log.error(
            "unfinished runs use a workflow definition this worker does not have",
            extra={"action": "workflow_definition_missing", **entry},
        )
    return missing
