"""Statements on ``awooop_project`` and ``awooop_credential``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, text

from awooop.domain.limits import ProjectLimits
from awooop.workflows import registry

# The width of ``awooop_project.name``.
MAX_NAME_LENGTH = 200


class ProjectExists(Exception):
    """A project with this id already exists."""


class InvalidName(ValueError):
    """A display name the project cannot hold; the message says the rule."""


class TokenRegistered(Exception):
    """The project already has this token as an active API token."""

    def __init__(self, project_id: str, role: str, credential_id: str) -> None:
        super().__init__(
            f"project {project_id!r} already has this token as an active {role} token "
            f"(credential {credential_id})"
        )
        self.project_id = project_id
        self.role = role
        self.credential_id = credential_id


class EngineOnlyWorkflow(ValueError):
    """A workflow only the engine starts was named for a route or the allowed list."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(
            f"{', '.join(map(repr, names))} "
            f"{'is a workflow' if len(names) == 1 else 'are workflows'} the engine starts "
            "itself: a project cannot route to it or let clients start it"
        )
        self.names = names


def check_name(name: str) -> str:
    """``name`` if a project can hold it as its display name, else :class:`InvalidName`."""
    if not name or len(name) > MAX_NAME_LENGTH:
        raise InvalidName(f"a project name is 1 to {MAX_NAME_LENGTH} characters")
    if not name.isprintable():
        raise InvalidName(
            "a project name may not hold control characters or bytes that are not UTF-8"
        )
    return name


def _refuse_engine_only(names: list[str]) -> None:
    engine_only = sorted({n for n in names if registry.engine_only(n)})
    if engine_only:
        raise EngineOnlyWorkflow(engine_only)


_INSERT_PROJECT = text(
    """
INSERT INTO awooop_project (project_id, name, routes)
VALUES (:project_id, :name, CAST(:routes AS jsonb))
ON CONFLICT (project_id) DO NOTHING
"""
)

_INSERT_CREDENTIAL = text(
    """
INSERT INTO awooop_credential
    (project_id, kind, channel_type, role, secret_hash, secret_encrypted)
VALUES (:project_id, :kind, :channel_type, :role, :secret_hash, :secret_encrypted)
"""
)


def create_project(conn: Connection, project_id: str, name: str, routes: dict[str, str]) -> None:
    check_name(name)
    _refuse_engine_only(list(routes.values()))
    inserted = conn.execute(
        _INSERT_PROJECT, {"project_id": project_id, "name": name, "routes": json.dumps(routes)}
    ).rowcount
    if inserted != 1:
        raise ProjectExists(project_id)


# The project's row, locked until the transaction ends: registrations of API tokens in one
# project take it first, so they run one after another and each sees those before it.
_LOCK_PROJECT = text("SELECT 1 FROM awooop_project WHERE project_id = :project_id FOR UPDATE")

_ACTIVE_TOKEN = text(
    """
SELECT credential_id, role FROM awooop_credential
WHERE project_id = :project_id AND kind = 'api_token' AND secret_hash = :secret_hash
  AND revoked_at IS NULL
LIMIT 1
"""
)


def add_api_token(conn: Connection, project_id: str, role: str, token_hash: str) -> None:
    """Add an API token; :class:`TokenRegistered` if the project already has it as an active
    token (in whatever role: one token, one role). Takes the project's row lock (call it in a
    transaction), so two registrations of one token cannot both pass the check."""
    conn.execute(_LOCK_PROJECT, {"project_id": project_id})
    found = conn.execute(
        _ACTIVE_TOKEN, {"project_id": project_id, "secret_hash": token_hash}
    ).first()
    if found is not None:
        raise TokenRegistered(project_id, found.role, str(found.credential_id))
    conn.execute(
        _INSERT_CREDENTIAL,
        {
            "project_id": project_id,
            "kind": "api_token",
            "channel_type": None,
            "role": role,
            "secret_hash": token_hash,
            "secret_encrypted": None,
        },
    )


def add_channel_secret(
    conn: Connection,
    project_id: str,
    channel_type: str,
    *,
    secret_hash: str | None = None,
    secret_encrypted: str | None = None,
) -> None:
    conn.execute(
        _INSERT_CREDENTIAL,
        {
            "project_id": project_id,
            "kind": "channel_secret",
            "channel_type": channel_type,
            "role": None,
            "secret_hash": secret_hash,
            "secret_encrypted": secret_encrypted,
        },
    )


# Merge a JSON object into one of the project's JSONB columns (the names are fixed here).
# A route or a limit set to null is removed (no route; no limit).
_MERGE = {
    column: text(
        f"""
UPDATE awooop_project
SET {column} = {merged}
WHERE project_id = :project_id
RETURNING {column} AS merged
"""
    )
    for column, merged in (
        ("routes", "jsonb_strip_nulls(routes || CAST(:values AS jsonb))"),
        ("config", "config || CAST(:values AS jsonb)"),
        ("limits", "jsonb_strip_nulls(limits || CAST(:values AS jsonb))"),
    )
}


def _merge(
    conn: Connection, column: str, project_id: str, values: dict[str, Any]
) -> dict[str, Any] | None:
    row = conn.execute(
        _MERGE[column], {"project_id": project_id, "values": json.dumps(values)}
    ).first()
    return None if row is None else row.merged


def set_routes(
    conn: Connection, project_id: str, routes: dict[str, str | None]
) -> dict[str, str] | None:
    """Merge ``routes`` into the project's (None takes a channel's route off: its events are
    answered "ignored"); returns the new routes, None if no such project.
    :class:`EngineOnlyWorkflow` (nothing changed) for a route to a workflow only the engine
    starts."""
    _refuse_engine_only([w for w in routes.values() if w is not None])
    return _merge(conn, "routes", project_id, routes)


def set_config(conn: Connection, project_id: str, config: dict[str, Any]) -> dict[str, Any] | None:
    """Merge ``config`` into the project's; the new config, None if no such project."""
    return _merge(conn, "config", project_id, config)


def set_limits(
    conn: Connection, project_id: str, limits: dict[str, int | None]
) -> dict[str, int] | None:
    """Merge ``limits`` into the project's (None removes a limit); the new limits, None if no
    such project."""
    return _merge(conn, "limits", project_id, limits)


_ALLOWED_WORKFLOWS = text(
    "SELECT allowed_workflows FROM awooop_project WHERE project_id = :project_id"
)

# One statement: the list with ``allow`` added and ``disallow`` taken out, sorted, no repeats.
_SET_ALLOWED_WORKFLOWS = text(
    """
UPDATE awooop_project p
SET allowed_workflows = (
    SELECT COALESCE(jsonb_agg(name ORDER BY name), '[]'::jsonb)
    FROM (
        SELECT jsonb_array_elements_text(p.allowed_workflows) AS name
        UNION
        SELECT jsonb_array_elements_text(CAST(:allow AS jsonb))
    ) names
    WHERE name NOT IN (SELECT jsonb_array_elements_text(CAST(:disallow AS jsonb)))
)
WHERE project_id = :project_id
RETURNING allowed_workflows
"""
)


def allowed_workflows(conn: Connection, project_id: str) -> list[str] | None:
    """The workflows the project allows by name; None if no such project."""
    row = conn.execute(_ALLOWED_WORKFLOWS, {"project_id": project_id}).first()
    return None if row is None else list(row.allowed_workflows)


def set_allowed_workflows(
    conn: Connection, project_id: str, allow: list[str], disallow: list[str]
) -> list[str] | None:
    """Add ``allow`` to the workflows the project allows by name and take ``disallow`` out;
    the new list (sorted), None if no such project. :class:`EngineOnlyWorkflow` (nothing
    changed) if ``allow`` names a workflow only the engine starts."""
    _refuse_engine_only(allow)
    params = {
        "project_id": project_id,
        "allow": json.dumps(allow),
        "disallow": json.dumps(disallow),
    }
    row = conn.execute(_SET_ALLOWED_WORKFLOWS, params).first()
    return None if row is None else list(row.allowed_workflows)


_SET_RUN_RETENTION = text(
    """
UPDATE awooop_project SET run_retention_days = :days
WHERE project_id = :project_id
RETURNING run_retention_days
"""
)


def set_run_retention(conn: Connection, project_id: str, days: int | None) -> bool:
    """Keep the project's finished runs ``days`` days (None: the deployment's default);
    False if no such project."""
    params = {"project_id": project_id, "days": days}
    return conn.execute(_SET_RUN_RETENTION, params).first() is not None


_PROJECT_EXISTS = text("SELECT 1 FROM awooop_project WHERE project_id = :project_id")


def project_exists(conn: Connection, project_id: str) -> bool:
    return conn.execute(_PROJECT_EXISTS, {"project_id": project_id}).first() is not None


@dataclass(frozen=True)
class CredentialRow:
    credential_id: str
    kind: str
    channel_type: str | None
    role: str | None
    secret_hash: str | None
    secret_encrypted: str | None


@dataclass(frozen=True)
class ProjectAuth:
    """What ingress needs to authenticate and route one request for one project."""

    project_id: str
    routes: dict[str, Any]
    credentials: tuple[CredentialRow, ...]
    config: dict[str, Any] = field(default_factory=dict)
    limits: ProjectLimits = field(default_factory=ProjectLimits)
    allowed_workflows: tuple[str, ...] = ()

    def allows(self, workflow: str) -> bool:
        """Whether a client may start ``workflow`` by name: it is routed for a channel or
        allowed by name (:func:`load_auth` leaves out workflows only the engine starts)."""
        return workflow in self.routes.values() or workflow in self.allowed_workflows

    def channel_secrets(self, channel_type: str) -> list[CredentialRow]:
        return [
            c
            for c in self.credentials
            if c.kind == "channel_secret" and c.channel_type == channel_type
        ]

    def api_tokens(self) -> list[CredentialRow]:
        return [c for c in self.credentials if c.kind == "api_token"]


# One round trip: the project's routes and its active credentials of the requested kind.
_PROJECT_AUTH = text(
    """
SELECT p.routes, p.config, p.limits, p.allowed_workflows,
       c.credential_id, c.kind, c.channel_type, c.role, c.secret_hash, c.secret_encrypted
FROM awooop_project p
LEFT JOIN awooop_credential c
       ON c.project_id = p.project_id
      AND c.revoked_at IS NULL
      AND (c.kind = 'api_token' OR c.channel_type = :channel_type)
WHERE p.project_id = :project_id
"""
)


def load_auth(conn: Connection, project_id: str, channel_type: str) -> ProjectAuth | None:
    """The project's routes, allowed workflows, config and limits, its API tokens and the
    secrets of ``channel_type``. Routes to and permissions for workflows only the engine
    starts are left out (stored before they were refused): they start nothing."""
    rows = conn.execute(
        _PROJECT_AUTH, {"project_id": project_id, "channel_type": channel_type}
    ).all()
    if not rows:
        return None
    creds = tuple(
        CredentialRow(
            str(r.credential_id), r.kind, r.channel_type, r.role, r.secret_hash, r.secret_encrypted
        )
        for r in rows
        if r.kind is not None
    )
    return ProjectAuth(
        project_id=project_id,
        routes={
            channel: workflow
            for channel, workflow in rows[0].routes.items()
            if not (isinstance(workflow, str) and registry.engine_only(workflow))
        },
        credentials=creds,
        config=rows[0].config,
        limits=ProjectLimits.from_json(rows[0].limits),
        allowed_workflows=tuple(
            w for w in rows[0].allowed_workflows if not registry.engine_only(w)
        ),
    )


_OUTBOUND_KEYS = text(
    """
SELECT secret_encrypted FROM awooop_credential
WHERE project_id = :project_id AND kind = 'channel_secret' AND channel_type = :channel_type
  AND revoked_at IS NULL AND secret_encrypted IS NOT NULL
ORDER BY created_at DESC
"""
)


def outbound_keys(conn: Connection, project_id: str, channel_type: str) -> list[str]:
    """The project's encrypted credentials for calling a provider (``telegram:bot``,
    ``line:access``, ``gitea:token``, ``webhook:signing``), newest first."""
    params = {"project_id": project_id, "channel_type": channel_type}
    return [r.secret_encrypted for r in conn.execute(_OUTBOUND_KEYS, params)]


_LIST_CREDENTIALS = text(
    """
SELECT credential_id, kind, channel_type, role, created_at, revoked_at
FROM awooop_credential
WHERE project_id = :project_id
ORDER BY created_at, credential_id
"""
)


def list_credentials(conn: Connection, project_id: str) -> list[dict[str, Any]]:
    """The project's credentials without their secrets (ids name actors in the audit trail)."""
    return [dict(r._mapping) for r in conn.execute(_LIST_CREDENTIALS, {"project_id": project_id})]


_REVOKE = text(
    """
UPDATE awooop_credential SET revoked_at = now()
WHERE project_id = :project_id AND credential_id = :credential_id AND revoked_at IS NULL
RETURNING credential_id
"""
)


def revoke_credential(conn: Connection, project_id: str, credential_id: Any) -> bool:
    """Revoke one active credential; False when the project has no such active one."""
    params = {"project_id": project_id, "credential_id": credential_id}
    return conn.execute(_REVOKE, params).first() is not None


# The projects where the token behind an active admin credential is an active admin token
# too (the same secret registered in each: `awooop project token P --role admin --stdin`),
# with that project's credential. A handful of credentials per project: no index needed.
_ADMIN_PROJECTS = text(
    """
SELECT p.project_id, p.name, other.credential_id
FROM awooop_credential mine
JOIN awooop_credential other
  ON other.secret_hash = mine.secret_hash AND other.kind = 'api_token'
 AND other.role = 'admin' AND other.revoked_at IS NULL
JOIN awooop_project p ON p.project_id = other.project_id
WHERE mine.credential_id = :credential_id AND mine.kind = 'api_token'
  AND mine.role = 'admin' AND mine.revoked_at IS NULL
ORDER BY p.project_id
"""
)


def admin_projects(conn: Connection, credential_id: str) -> list[dict[str, Any]]:
    """The projects (id, name, credential id there) in which the token of the active admin
    credential ``credential_id`` is an active admin token; none for any other credential."""
    rows = conn.execute(_ADMIN_PROJECTS, {"credential_id": credential_id}).mappings()
    return [{**r, "credential_id": str(r["credential_id"])} for r in rows]
