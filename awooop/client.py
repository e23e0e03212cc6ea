"""A typed Python client for AwoooP's HTTP API: start a workflow, read a run, wait for it to
finish, signal it, cancel it.

    client = Client("http://127.0.0.1:8000", token, "ops")
    started = client.start("alert-triage", {"host": "db-1"}, key="ticket-4711")
    run = client.wait(started.run_id, timeout=60)

An answer the API refuses raises :class:`ApiError` with its HTTP status, error code and
message; the network failing raises what ``requests`` raises (``requests.RequestException``).
Every call that creates something takes the caller's key, so a retry after a lost answer is
answered with what the first call made.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

from awooop.domain.states import TERMINAL_STATUSES

DEFAULT_TIMEOUT = 10.0


class ApiError(Exception):
    """The API answered with an error: ``status`` (HTTP), ``code`` (``E-…``, None when the
    body was not an AwoooP error, e.g. a proxy's page) and ``message``."""

    def __init__(self, status: int, code: str | None, message: str) -> None:
        self.status = status
        self.code = code
        self.message = message
        super().__init__(f"{status} {code}: {message}" if code else f"{status}: {message}")


@dataclass(frozen=True)
class Started:
    """What a start request made: a new run (``created``) or the one the same key made."""

    run_id: str
    status: str
    created: bool

    @property
    def duplicate(self) -> bool:
        return not self.created


@dataclass(frozen=True)
class Run:
    """A run as ``GET /v1/projects/{p}/runs/{run_id}`` shows it; ``raw`` has every field."""

    run_id: str
    status: str
    saga_status: str
    workflow_name: str
    workflow_version: int
    current_step: str | None
    output: Any
    failure_code: str | None
    failure_reason: str | None
    version: int
    created_at: str
    finished_at: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Run:
        return cls(
            run_id=body["run_id"],
            status=body["status"],
            saga_status=body["saga_status"],
            workflow_name=body["workflow_name"],
            workflow_version=body["workflow_version"],
            current_step=body.get("current_step"),
            output=body.get("output"),
            failure_code=body.get("failure_code"),
            failure_reason=body.get("failure_reason"),
            version=body["version"],
            created_at=body["created_at"],
            finished_at=body.get("finished_at"),
            raw=dict(body),
        )


class Client:
    """One project's API, with an API token of a role that may do what you call (ingest or
    above to start and signal, viewer to read, operator to cancel)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        project_id: str,
        timeout: float = DEFAULT_TIMEOUT,
        session: requests.Session | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.project_id = project_id
        self.timeout = timeout
        self._session = session or requests.Session()
        self._auth = {"Authorization": f"Bearer {token}"}

    def start(
        self,
        workflow: str,
        input: Mapping[str, Any] | None = None,  # noqa: A002 - the API's own name
        *,
        key: str,
        version: int | None = None,
    ) -> Started:
        """Start ``workflow`` (the latest version unless ``version``) with ``input`` as its
        event. ``key`` is the event's idempotency key: the same key and body again return the
        same run; the same key with another body raises ``E-IDEMPOTENT-002``."""
        body: dict[str, Any] = {"workflow": workflow, "input": dict(input or {})}
        if version is not None:
            body["version"] = version
        answer = self._call("POST", "/runs", json=body, headers={"Idempotency-Key": key})
        return Started(answer["run_id"], answer["status"], created="code" not in answer)

    def get(self, run_id: str) -> Run:
        """The run now."""
        return Run.from_json(self._call("GET", f"/runs/{_segment(run_id)}"))

    def wait(
        self,
        run_id: str,
        statuses: Collection[str] = TERMINAL_STATUSES,
        timeout: float = 60.0,
        poll: float = 0.5,
    ) -> Run:
        """Poll the run until its status is one of ``statuses`` (by default: finished) and
        return it; ``TimeoutError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.get(run_id)
            if run.status in statuses:
                return run
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"run {run_id} is still {run.status} (step {run.current_step}) after "
                    f"{timeout:g} s; waited for {', '.join(sorted(statuses))}"
                )
            time.sleep(min(poll, left))

    def signal(
        self,
        run_id: str,
        name: str,
        payload: Mapping[str, Any] | None = None,
        *,
        signal_id: str,
    ) -> dict[str, Any]:
        """Send signal ``name`` with ``payload`` to a run that waits for it (or will).
        ``signal_id`` makes it idempotent: a redelivery answers with code
        ``E-IDEMPOTENT-001``, not an error. A finished run raises a 409."""
        return self._call(
            "POST",
            f"/runs/{_segment(run_id)}/signals/{_segment(name)}",
            json=dict(payload or {}),
            headers={"Idempotency-Key": signal_id},
        )

    def cancel(
        self, run_id: str, reason: str | None = None, *, operation_id: str | None = None
    ) -> dict[str, Any]:
        """Cancel a run (an operator operation): it turns back at the next step boundary.
        Pass your own ``operation_id`` to make a retry of this call a replay (default: a new
        one per call)."""
        body: dict[str, Any] = {"operation_id": operation_id or str(uuid.uuid4())}
        if reason is not None:
            body["reason"] = reason
        return self._call("POST", f"/runs/{_segment(run_id)}/cancel", json=body)

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        url = f"{self.base_url}/v1/projects/{_segment(self.project_id)}{path}"
        response = self._session.request(
            method,
            url,
            json=json,
            headers={**self._auth, **(headers or {})},
            timeout=self.timeout,
        )
        body = _json_or_none(response)
        if response.status_code >= 400:
            raise _error(response, body)
        if not isinstance(body, dict):
            raise ApiError(response.status_code, None, f"not a JSON object: {response.text[:200]}")
        return body


def _segment(value: str) -> str:
    """``value`` as one path segment (a ``/`` in it cannot reach another resource)."""
    return quote(value, safe="")


def _json_or_none(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _error(response: requests.Response, body: Any) -> ApiError:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        return ApiError(response.status_code, error["code"], str(error.get("message", "")))
    text = " ".join(response.text.split())[:200] or response.reason
    return ApiError(response.status_code, None, text)
