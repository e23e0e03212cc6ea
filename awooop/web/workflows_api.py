"""``GET /v1/projects/{project_id}/workflows``: the workflow versions of this deployment and
the project's open runs on each.

One entry per (name, version) that this web process has registered or that an unfinished
run of the project uses, by name then version:

- ``open_runs``: the project's unfinished runs of that version (whatever their digest);
- ``registered``: this web process has the version; ``digest`` is its definition's digest
  (null when not registered);
- ``open_runs_other_digest``: open runs this process's definition cannot run — all of them
  when the version is not registered, else those that started on another digest (a
  definition changed without a new version);
- ``latest``: the version new events start (the highest registered one of that name).

What the web process has registered is what it imported (the built-ins and
``AWOOOP_WORKFLOW_MODULES``); workers are separate processes and may differ. Role
``viewer`` or above. Not paged: a deployment has a handful of versions.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from awooop.store import runs
from awooop.web import context, params, roles
from awooop.workflows import registry

blueprint = Blueprint("workflows_api", __name__)


def versions(open_runs: list[tuple[str, int, str, int]]) -> list[dict[str, Any]]:
    """The entries described above, from :func:`awooop.store.runs.active_definitions`."""
    known = {(wf.name, wf.version): wf for wf in registry.all_workflows()}
    counts: dict[tuple[str, int], dict[str, int]] = {}
    for name, version, run_digest, count in open_runs:
        counts.setdefault((name, version), {})[run_digest] = count
    entries = []
    for name, version in sorted(known.keys() | counts.keys()):
        workflow = known.get((name, version))
        by_digest = counts.get((name, version), {})
        newest = registry.latest(name)
        digest = workflow.digest if workflow is not None else None
        entries.append(
            {
                "name": name,
                "version": version,
                "description": workflow.description if workflow is not None else None,
                "registered": workflow is not None,
                "digest": digest,
                "latest": newest is not None and newest.version == version,
                "open_runs": sum(by_digest.values()),
                "open_runs_other_digest": sum(n for d, n in by_digest.items() if d != digest),
            }
        )
    return entries


def project_versions(project_id: str) -> list[dict[str, Any]]:
    with context.engine().connect() as conn:
        open_runs = runs.active_definitions(conn, project_id)
    return versions(open_runs)


@blueprint.get("/v1/projects/<project_id>/workflows")
def list_workflows(project_id: str) -> Response:
    caller = roles.authenticate(project_id, roles.READ)
    params.check_known(request.args, ())
    return jsonify({"workflows": project_versions(caller.project_id)})
