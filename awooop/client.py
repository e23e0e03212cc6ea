"""A typed Python client for AwoooP's HTTP API: start a workflow, read a run, wait for it to
finish, signal it; list and find runs and read a run's history; operate on runs (cancel,
pause, resume, the retries), rerun finished runs, decide approvals, list the workers.

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
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

from awooop.domain.states import TERMINAL_STATUSES

DEFAULT_TIMEOUT = 10.0
# The management operations, by the name of their URL segment.
OPERATIONS = ("pause", "resume", "cancel", "retry-compensation", "retry-resolution")


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
    """A run as ``GET /v1/projects/{p}/runs/{run_id}`` shows it; ``raw`` has every field. In a
    list (:meth:`Client.list_runs`) ``output`` is None: a list shows no input, output or
    step journal."""

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


@dataclass(frozen=True)
class RunPage:
    """A page of runs, newest first; ``next_cursor`` (None on the last page) asks for the
    next one with the same filters."""

    runs: list[Run]
    next_cursor: str | None


@dataclass(frozen=True)
class RunFilters:
    """The runs API's filters (every one optional): statuses and saga statuses (any of),
    workflow, channel, a created or finished time range (ISO 8601 with an offset; ``_from``
    inclusive, ``_until`` exclusive), failure code, ``outbox`` (PENDING or PARKED: runs
    with unsent messages), the event id or idempotency key a run was started with, and
    tags (``("service:db-1", ...)``, all of them)."""

    status: tuple[str, ...] = ()
    saga_status: tuple[str, ...] = ()
    workflow: str | None = None
    channel: str | None = None
    created_from: str | None = None
    created_until: str | None = None
    finished_from: str | None = None
    finished_until: str | None = None
    failure_code: str | None = None
    outbox: str | None = None
    provider_event_id: str | None = None
    idempotency_key: str | None = None
    # ``KEY:VALUE`` each; a run must have all of them.
    tag: tuple[str, ...] = ()

    def query(self) -> dict[str, str | list[str]]:
        """The query parameters: the statuses comma-separated, the tags repeated, the
        absent ones left out."""
        out: dict[str, str | list[str]] = {}
        for name, value in vars(self).items():
            if name == "tag":
                if value:
                    out[name] = list(value)
                continue
            if isinstance(value, tuple):
                value = ",".join(value) or None
            if value is not None:
                out[name] = value
        return out

    def body(self) -> dict[str, str | list[str]]:
        """The filters as a bulk rerun's body names them: lists as lists."""
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in vars(self).items()
            if value not in (None, ())
        }


@dataclass(frozen=True)
class Operated:
    """What a management operation did: ``applied`` (it changed the run), ``replayed`` (this
    ``operation_id`` was seen before: nothing changed now), and the run's state after it."""

    run_id: str
    operation: str
    operation_id: str
    applied: bool
    replayed: bool
    status: str
    saga_status: str
    control_state: str
    version: int
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Operated:
        fields = (name for name in cls.__dataclass_fields__ if name != "raw")
        return cls(**{name: body[name] for name in fields}, raw=dict(body))


@dataclass(frozen=True)
class Rerun:
    """A run a rerun request made: ``rerun_of`` the run it reran, ``available_at`` when it
    becomes claimable; ``created`` False when the key had made it before (a duplicate)."""

    run_id: str
    rerun_of: str
    status: str
    available_at: str
    created: bool

    @classmethod
    def from_json(cls, body: Mapping[str, Any], created: bool) -> Rerun:
        fields = ("run_id", "rerun_of", "status", "available_at")
        return cls(**{name: body[name] for name in fields}, created=created)


@dataclass(frozen=True)
class BulkRerun:
    """What a bulk rerun did (or, ``dry_run``, would do): ``count`` runs matched (at most the
    limit; ``more`` when more match — pass ``next_cursor`` as ``cursor`` for the next ones),
    ``run_ids`` the matched runs (a dry run), ``runs`` the new runs, ``created`` False for a
    duplicate request."""

    dry_run: bool
    count: int
    more: bool
    next_cursor: str | None
    rate: float
    run_ids: list[str]
    runs: list[Rerun]
    created: bool
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> BulkRerun:
        created = "code" not in body
        return cls(
            dry_run=body["dry_run"],
            count=body["count"],
            more=body["more"],
            next_cursor=body["next_cursor"],
            rate=body["rate"],
            run_ids=list(body.get("run_ids", [])),
            runs=[Rerun.from_json(r, created) for r in body.get("runs", [])],
            created=created,
            raw=dict(body),
        )


@dataclass(frozen=True)
class Worker:
    """A worker process the system knows (it has held a lease): ``seen_at`` its last beat,
    ``seen_seconds_ago`` by the database's clock, ``judged_dead_at`` when the reaper took its
    runs, ``runs_held`` the project's RUNNING runs it holds."""

    worker_id: str
    host: str
    pid: int
    started_at: str
    seen_at: str
    seen_seconds_ago: float
    judged_dead_at: str | None
    runs_held: int

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Worker:
        return cls(**{name: body[name] for name in cls.__dataclass_fields__})


class Client:
    """One project's API, with an API token of a role that may do what you call (ingest or
    above to start and signal, viewer to read, operator to operate on runs)."""

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

    def list_runs(
        self,
        filters: RunFilters | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RunPage:
        """One page of the project's runs, newest first (``limit``: 1-200, the API's default
        50). Pass a page's ``next_cursor`` as ``cursor``, with the same filters, for the
        next."""
        query = (filters or RunFilters()).query()
        answer = self._call("GET", "/runs", params=_paged(query, limit, cursor))
        runs = [Run.from_json(run) for run in answer["runs"]]
        return RunPage(runs, answer["next_cursor"])

    def iter_runs(
        self, filters: RunFilters | None = None, *, limit: int | None = None
    ) -> Iterator[Run]:
        """Every run that matches, newest first, page after page (``limit`` a page's size)."""
        query = (filters or RunFilters()).query()
        return (Run.from_json(run) for run in self._pages("/runs", "runs", query, limit))

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's whole audit trail in ``seq`` order (transitions, leases, steps,
        operations): each ``seq``, ``kind``, ``from_status``, ``to_status``, ``trigger``,
        ``trigger_id``, ``actor``, ``detail``, ``at``."""
        return list(self._pages(f"/runs/{_segment(run_id)}/events", "events", {}, None))

    def operate(
        self,
        run_id: str,
        operation: str,
        reason: str | None = None,
        *,
        operation_id: str | None = None,
        if_version: int | None = None,
    ) -> Operated:
        """A management operation (one of :data:`OPERATIONS`; role operator or admin).
        ``operation_id`` makes it idempotent: pass your own so that a retry of this call is
        a replay (default: a new one, returned in the answer). ``if_version`` (the run's
        ``version``) refuses it with 412 ``E-OPERATION-002`` if the run changed since."""
        answer = self._operation(run_id, operation, reason, operation_id, if_version)
        return Operated.from_json(answer)

    def _operation(
        self,
        run_id: str,
        operation: str,
        reason: str | None,
        operation_id: str | None,
        if_version: int | None,
    ) -> dict[str, Any]:
        path = f"/runs/{_segment(run_id)}/{operation}"
        if operation not in OPERATIONS:
            raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}")
        body: dict[str, Any] = {"operation_id": operation_id or str(uuid.uuid4())}
        if reason is not None:
            body["reason"] = reason
        headers = {"If-Match": f'"{if_version}"'} if if_version is not None else {}
        return self._call("POST", path, json=body, headers=headers)

    def cancel(
        self, run_id: str, reason: str | None = None, *, operation_id: str | None = None
    ) -> dict[str, Any]:
        """Cancel a run (an operator operation): it turns back at the next step boundary.
        Pass your own ``operation_id`` to make a retry of this call a replay (default: a new
        one per call). Answers the API's JSON; :meth:`operate` reads it."""
        return self._operation(run_id, "cancel", reason, operation_id, None)

    def rerun(self, run_id: str, *, key: str, reason: str | None = None) -> Rerun:
        """Start a finished run again: a new run with its input (role operator or admin).
        ``key`` makes it idempotent: the same key again returns the run it made
        (``created`` False); an unfinished run raises a 409 ``E-RERUN-001``."""
        body = {"reason": reason} if reason is not None else {}
        answer = self._call(
            "POST", f"/runs/{_segment(run_id)}/rerun", json=body, headers={"Idempotency-Key": key}
        )
        return Rerun.from_json(answer, created="code" not in answer)

    def rerun_matching(
        self,
        filters: RunFilters | None = None,
        *,
        key: str | None = None,
        dry_run: bool = False,
        limit: int | None = None,
        rate: float | None = None,
        cursor: str | None = None,
        reason: str | None = None,
    ) -> BulkRerun:
        """Rerun every finished run ``filters`` match (role admin): at most ``limit`` (the
        API's default 100, at most 1000), newest first, the new runs becoming claimable at
        most ``rate`` per second (the deployment's default and maximum apply). ``dry_run``
        only counts them (no ``key`` needed); otherwise ``key`` makes the request
        idempotent."""
        body: dict[str, Any] = {"filters": (filters or RunFilters()).body(), "dry_run": dry_run}
        optional = {"limit": limit, "rate": rate, "cursor": cursor, "reason": reason}
        body.update({name: value for name, value in optional.items() if value is not None})
        if not dry_run and key is None:
            raise ValueError("a bulk rerun needs a key (the same for every retry of it)")
        headers = {"Idempotency-Key": key} if key is not None else {}
        return BulkRerun.from_json(self._call("POST", "/runs/rerun", json=body, headers=headers))

    def decide_approval(
        self,
        token: str,
        decision: str,
        *,
        actor: str | None = None,
        comment: str | None = None,
        run_id: str | None = None,
        step: str | None = None,
    ) -> dict[str, Any]:
        """Approve or reject (``decision``) the approval the prompt's ``token`` stands for, as
        ``actor`` (default: the API token's role). With ``run_id`` or ``step`` the API checks
        the token is bound to them. Answers ``{"status": "approved" | "rejected", "run_id"}``;
        an expired token raises a 410, a decided one a 409."""
        body: dict[str, Any] = {"decision": decision}
        optional = {"actor": actor, "comment": comment, "run_id": run_id, "step": step}
        body.update({key: value for key, value in optional.items() if value is not None})
        return self._call("POST", f"/approvals/{_segment(token)}", json=body)

    def workers(self) -> list[Worker]:
        """The worker processes the system knows, with the project's runs each holds."""
        return [Worker.from_json(w) for w in self._call("GET", "/workers")["workers"]]

    def _pages(
        self, path: str, key: str, query: Mapping[str, str | list[str]], limit: int | None
    ) -> Iterator[dict[str, Any]]:
        """The items under ``key`` of every page of a list, following ``next_cursor``."""
        cursor = None
        while True:
            answer = self._call("GET", path, params=_paged(query, limit, cursor))
            yield from answer[key]
            cursor = answer["next_cursor"]
            if cursor is None:
                return

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str | list[str]] | None = None,
    ) -> dict[str, Any]:
        url = f"{self.base_url}/v1/projects/{_segment(self.project_id)}{path}"
        response = self._session.request(
            method,
            url,
            json=json,
            params=params,
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


def _paged(
    query: Mapping[str, str | list[str]], limit: int | None, cursor: str | None
) -> dict[str, str | list[str]]:
    paged = dict(query)
    if limit is not None:
        paged["limit"] = str(limit)
    if cursor is not None:
        paged["cursor"] = cursor
    return paged


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
