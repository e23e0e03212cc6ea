"""Who is calling: a project API token and its role.

Roles of API tokens: ``viewer`` < ``operator`` < ``admin`` for the runs API, and ``ingest``,
which only admits events, sends signals and delivers tool results. Each kind of request
names the set of roles it allows here (``READ``, ``OPERATE``, ``RERUN`` …). A missing or
unknown token is a 401 ``E-AUTH-001`` (alike for an unknown project, so projects cannot be
enumerated); a valid token of this project whose role is not enough is a 403
``E-AUTH-002``.
"""

from __future__ import annotations

from dataclasses import dataclass

from awooop import errors
from awooop import secrets as crypto
from awooop.channels import api as api_channel
from awooop.store.projects import CredentialRow, ProjectAuth
from awooop.web import context

READ = frozenset({"viewer", "operator", "admin"})
OPERATE = frozenset({"operator", "admin"})
ADMINISTER = frozenset({"admin"})
# Rerunning finished runs: one run (POST …/runs/{id}/rerun) for operators and admins; every
# run a filter matches (POST …/runs/rerun, up to a thousand at a time) for admins only.
RERUN = frozenset({"operator", "admin"})
RERUN_MANY = frozenset({"admin"})
# Roles whose tokens may admit events, send signals and deliver tool results (a viewer token
# only reads).
ADMIT = frozenset({"ingest", "operator", "admin"})


@dataclass(frozen=True)
class Caller:
    """An authenticated API token of ``auth.project_id``."""

    auth: ProjectAuth
    credential_id: str
    role: str

    @property
    def project_id(self) -> str:
        return self.auth.project_id

    @property
    def actor(self) -> str:
        """How the audit trail names this caller: the credential, never the token."""
        return f"api-token:{self.credential_id}"


def matching_token(token: str | None, auth: ProjectAuth | None) -> CredentialRow | None:
    """The project's active API token ``token`` is, if any (constant time over all tokens)."""
    if token is None or auth is None:
        return None
    tokens = [c for c in auth.api_tokens() if c.secret_hash]
    index = crypto.index_of_matching_hash(token, [c.secret_hash or "" for c in tokens])
    return None if index is None else tokens[index]


def authenticate(project_id: str, roles: frozenset[str]) -> Caller:
    """The caller's token, if it belongs to this project and has one of ``roles``."""
    auth = context.project_auth(project_id, "api")
    credential = matching_token(api_channel.bearer_token(context.raw_request()), auth)
    if auth is None or credential is None or credential.role is None:
        raise errors.Unauthenticated()
    if credential.role not in roles:
        raise errors.Forbidden(
            f"an API token with role {credential.role!r} cannot do this; "
            f"it needs one of: {', '.join(sorted(roles))}"
        )
    return Caller(auth=auth, credential_id=credential.credential_id, role=credential.role)
