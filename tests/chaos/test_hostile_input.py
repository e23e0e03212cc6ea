"""Scenario 8 — hostile input: 5,000 generated requests over every channel and the
runs API (random bytes, truncated and deeply nested JSON, duplicate keys, NUL bytes, huge
numbers, wrong and missing signatures and tokens, wrong content types, bodies over 1 MiB
plain and chunked, unknown projects, path tricks in ids, replays with another body) sent
concurrently to a real gunicorn over a fresh database.

What must hold, for every answer: no 5xx; the status is one the request may get (see
:mod:`tests.chaos.hostile`) and one ``/openapi.json`` documents for its operation; an error
is ``{"error": {"code", "message"}}`` with the code documented for that status and no stack
trace. And for the database: every row added to any ``awooop_*`` table belongs to a run an
answer reported as created (dedupe row, run row, first history row, deadline timer) — a
refused request writes nothing, counted exactly, table by table.

Part of ``make chaos``. The server, database and Redis come from the suite's own stack
(``chaos_stack`` started web-only: no worker, maintenance worker or beat, so nothing but the
requests writes); run it alone with::

    .venv/bin/pytest tests/chaos/test_hostile_input.py -p no:cacheprovider -s

``AWOOOP_HOSTILE_SEED`` / ``AWOOOP_HOSTILE_REQUESTS`` change the seed (8) and the size (5,000,
times ``AWOOOP_CHAOS_SCALE``). The preparation admits and executes runs of the test workflows
``noop-3``, ``test-tool`` and ``test-approval`` in this process; the web process loads
``tests.support.workflows`` too (``AWOOOP_WORKFLOW_MODULES``) so that it knows them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import statistics
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote

import pytest
import redis
from sqlalchemy import Engine, text

from awooop import cli, db, errors, secrets
from awooop.config import Settings
from awooop.engine import lease, runner
from awooop.workflows import registry
from tests.chaos import hostile
from tests.chaos.report import scaled
from tests.chaos.stack import ChaosStack
from tests.support import runs as test_runs
from tests.support import tokens

SEED = int(os.environ.get("AWOOOP_HOSTILE_SEED", "8"))
REQUESTS = int(os.environ.get("AWOOOP_HOSTILE_REQUESTS") or scaled(5000, least=200))
# Client threads: a bounded number of connections at a time, loopback only.
CONCURRENCY = 16
MAX_BODY_BYTES = 1024 * 1024
ADMISSION_PATH = re.compile(r"^/v1/projects/[^/]+/(runs|webhooks/[^/]+)$")
CATALOGUE = {
    cls.code: cls.http_status
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.AwoooPError)
}
TRACEBACK = re.compile(rb'Traceback \(most recent call last\)|File "[^"]+", line \d+')


@dataclasses.dataclass
class HostileTarget:
    """A server to send hostile requests to, and what they aim at.

    Contract for a harness providing its own: ``host``/``port`` serve AwoooP (limit 1 MiB);
    ``engine`` reaches the database it writes; ``credentials`` name a project with a route
    for every channel, a second project with none, and runs in the states they say; no
    worker, beat or other client acts on the database while the scenario runs (every row
    written is accounted for). ``queued`` counts messages waiting in the ``runs`` queue, or
    is None when that cannot be read.
    """

    host: str
    port: int
    engine: Engine
    credentials: hostile.Credentials
    queued: Callable[[], int] | None = None
    logs: Callable[[], str] = lambda: ""


def _prepare(engine: Engine, settings: Settings) -> hostile.Credentials:
    """Two projects and runs in the states the requests aim at, driven in this process."""
    project = cli.create_project(settings, f"hostile-{uuid.uuid4().hex[:8]}")
    other = cli.create_project(settings, f"other-{uuid.uuid4().hex[:8]}")
    with engine.begin() as conn:  # the other project routes nothing: events are ignored
        conn.execute(
            text("UPDATE awooop_project SET routes = '{}'::jsonb WHERE project_id = :p"),
            {"p": other["project_id"]},
        )
    project_id = project["project_id"]

    def run(workflow: str, execute: bool, project: str = project_id) -> str:
        run_id = test_runs.admit(engine, project, workflow)
        if execute:
            runner.execute(engine, settings, run_id)
        return str(run_id)

    pending = run("noop-3", execute=False)
    tool = run("test-tool", execute=True)
    waiting = run("test-approval", execute=True)
    approval_token = secrets.new_token()  # only ever sent in the prompt: give it one we know
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE awooop_approval SET token_hash = :hash WHERE run_id = :run_id"),
            {"hash": secrets.sha256_hex(approval_token), "run_id": waiting},
        )
        statuses = dict(
            conn.execute(
                text("SELECT run_id::text, status FROM awooop_run_state WHERE run_id = ANY(:r)"),
                {"r": [uuid.UUID(r) for r in (pending, tool, waiting)]},
            ).all()
        )
    assert statuses == {pending: "PENDING", tool: "WAITING_TOOL", waiting: "WAITING_APPROVAL"}
    return hostile.Credentials(
        project_id=project_id,
        secrets=project["secrets"],
        tokens=tokens.all_roles(engine, project_id),
        pending_run=pending,
        tool_run=tool,
        tool_step="diagnose",
        approval_run=waiting,
        approval_token=approval_token,
        approval_step="approve",
        other_project_id=other["project_id"],
        other_secrets=other["secrets"],
        other_token=other["api_token"],
        other_run=run("noop-3", execute=False, project=other["project_id"]),
        max_body_bytes=MAX_BODY_BYTES,
    )


# The workflows the preparation's runs use (noop-3 is built in), loaded by the web process
# next to the suite's own.
TEST_WORKFLOWS = "tests.support.workflows"


@pytest.fixture
def hostile_target(chaos_stack: ChaosStack) -> Iterator[HostileTarget]:
    """The chaos stack's gunicorn over its fresh database and Redis, started web-only: no
    worker, maintenance worker or beat, so that nothing but the requests writes."""
    stack = chaos_stack
    modules = stack.env["AWOOOP_WORKFLOW_MODULES"].split(",")
    stack.env["AWOOOP_WORKFLOW_MODULES"] = ",".join([*modules, TEST_WORKFLOWS])
    stack.env["AWOOOP_MAX_BODY_BYTES"] = str(MAX_BODY_BYTES)
    engine = db.make_engine(stack.database_url, pool_size=4)
    broker = redis.Redis.from_url(stack.broker_url)
    try:
        credentials = _prepare(engine, stack.settings)
        stack.start(workers=(), maintenance=False, beat=False)
        yield HostileTarget(
            host="127.0.0.1",
            port=int(stack.env["AWOOOP_PORT"]),
            engine=engine,
            credentials=credentials,
            queued=lambda: int(broker.llen("runs")),
            logs=stack.logs,
        )
    finally:
        # The lease keeper the preparation's runs started in this process stops with it.
        lease.stop_keeper()
        broker.close()
        engine.dispose()


# Reading the database ---------------------------------------------------------------------


def table_counts(engine: Engine) -> dict[str, int]:
    """Rows in every awooop_* table (found in the catalogue, so a new table is counted)."""
    with engine.connect() as conn:
        names = conn.execute(
            text(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                " AND tablename LIKE 'awooop\\_%' ORDER BY tablename"
            )
        ).scalars()
        return {
            name: conn.execute(text(f'SELECT count(*) FROM "{name}"')).scalar_one()
            for name in list(names)
        }


def run_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT run_id::text, workflow_name FROM awooop_run_state"))
        return {row.run_id for row in rows}


def deadline_timers(engine: Engine, runs: set[str]) -> int:
    """Timers admission writes for these runs: one per run whose workflow has a deadline."""
    if not runs:
        return 0
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT workflow_name, workflow_version FROM awooop_run_state"
                " WHERE run_id = ANY(:r)"
            ),
            {"r": [uuid.UUID(r) for r in runs]},
        ).all()
    return sum(1 for row in rows if registry.get(*row).deadline_seconds is not None)


# The document ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Operation:
    label: str
    pattern: re.Pattern[str]
    method: str
    responses: dict[str, Any]

    def codes(self, status: int) -> set[str] | None:
        """The error codes documented for ``status``; None when it lists none."""
        response = self.responses.get(str(status)) or {}
        schema = response.get("content", {}).get("application/json", {}).get("schema", {})
        for part in schema.get("allOf", []):
            code = part.get("properties", {}).get("error", {}).get("properties", {})
            if "code" in code:
                return set(code["code"]["enum"])
        return None


def operations(document: dict[str, Any]) -> list[Operation]:
    out = []
    for path, item in document["paths"].items():
        pattern = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")
        for method, operation in item.items():
            out.append(
                Operation(
                    f"{method.upper()} {path}", pattern, method.upper(), operation["responses"]
                )
            )
    return out


def documented(request: hostile.HostileRequest, ops: list[Operation]) -> Operation | None:
    """The documented operation this request reaches, by its decoded path and method."""
    path = unquote(request.target.partition("?")[0], errors="replace")
    for operation in ops:
        if operation.method == request.method and operation.pattern.match(path):
            return operation
    return None


# Checking one answer ------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    request: hostile.HostileRequest
    answer: hostile.Answer
    created: list[str] = dataclasses.field(default_factory=list)  # runs this answer created
    named: list[str] = dataclasses.field(default_factory=list)  # runs it names (duplicates)
    problems: list[str] = dataclasses.field(default_factory=list)


def check(request: hostile.HostileRequest, answer: hostile.Answer, ops: list[Operation]) -> Outcome:
    outcome = Outcome(request, answer)
    problem = outcome.problems.append
    status = answer.status
    if status is None:
        problem(f"no HTTP answer: {answer.error}")
        return outcome
    if status >= 500:
        problem(f"server error {status}")
    if status not in request.expect:
        problem(f"status {status} is not one this request may get ({sorted(request.expect)})")
    if TRACEBACK.search(answer.body):
        problem("the body has a stack trace")
    body: Any = None
    if answer.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        problem(f"content type {answer.headers.get('content-type')!r}, not application/json")
    else:
        try:
            body = json.loads(answer.body)
        except ValueError:
            problem("the body is not JSON")
    operation = documented(request, ops)
    if operation is not None and str(status) not in operation.responses:
        problem(f"{operation.label} does not document status {status}")
    if status >= 400:
        error = body.get("error") if isinstance(body, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        if not isinstance(code, str) or not isinstance(message, str):
            problem('the body is not {"error": {"code", "message"}}')
        else:
            if code not in request.expect.get(status, ()):
                expected = sorted(request.expect.get(status, ()))
                problem(f"code {code} is not one this request may get with {status} ({expected})")
            if CATALOGUE.get(code) != status:
                problem(f"code {code} is the catalogue's {CATALOGUE.get(code)}, answered {status}")
            codes = operation.codes(status) if operation is not None else None
            if codes is not None and code not in codes:
                problem(f"{operation.label} does not document {code} with {status}")
    elif (
        isinstance(body, dict)
        and request.method == "POST"
        and ADMISSION_PATH.match(request.target.partition("?")[0])
    ):
        _admission_runs(body, status, outcome)
    return outcome


def _admission_runs(body: dict[str, Any], status: int, outcome: Outcome) -> None:
    """The runs an admission answer reports: created (no code) and duplicates (its code)."""
    entries = body.get("runs") if isinstance(body.get("runs"), list) else [body]
    for entry in entries:
        if not isinstance(entry, dict) or "run_id" not in entry:
            continue
        if entry.get("code") == errors.DUPLICATE_EVENT_CODE:
            outcome.named.append(entry["run_id"])
        elif status == 202 and entry.get("status") == "PENDING":
            outcome.created.append(entry["run_id"])
        else:
            outcome.problems.append(f"an admission answer {status} with {entry}")


def play(target: HostileTarget, case: hostile.Case, ops: list[Operation]) -> list[Outcome]:
    """A case's requests in order; a duplicate must name the run its first request made."""
    outcomes: list[Outcome] = []
    for request in case.requests:
        answer = hostile.send(target.host, target.port, request)
        outcome = check(request, answer, ops)
        if request.same_run_as_first and outcomes:
            first = outcomes[0].created
            if outcome.named != first:
                outcome.problems.append(f"a duplicate names {outcome.named}, not {first}")
        outcomes.append(outcome)
    return outcomes


# The scenario ---------------------------------------------------------------------------------


@pytest.mark.timeout(900)
def test_hostile_requests_get_documented_refusals_and_write_nothing(hostile_target, figures):
    figures.scenario("8", "Hostile input")
    target = hostile_target
    cases = hostile.Generator(target.credentials, SEED).cases(REQUESTS)
    probe = hostile.HostileRequest(
        "openapi", "document", "GET", "/openapi.json", (), b"", hostile.OK, True
    )
    document = json.loads(hostile.send(target.host, target.port, probe).body)
    ops = operations(document)
    before = table_counts(target.engine)
    runs_before = run_ids(target.engine)
    queued_before = target.queued() if target.queued else None

    started = time.monotonic()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        outcomes = [o for batch in pool.map(lambda c: play(target, c, ops), cases) for o in batch]
    duration = time.monotonic() - started

    after = table_counts(target.engine)
    new_runs = run_ids(target.engine) - runs_before
    created = [run for o in outcomes for run in o.created]
    created_set = set(created)
    expected = {table: 0 for table in after}
    n = len(created_set)
    expected.update(
        {
            "awooop_run_state": n,
            "awooop_channel_event_dedupe": n,
            "awooop_run_event": n,
            "awooop_timer": deadline_timers(target.engine, created_set),
        }
    )
    delta = {table: after[table] - before.get(table, 0) for table in after}

    # Figures ----------------------------------------------------------------------------
    by_channel: dict[str, Counter[int | None]] = defaultdict(Counter)
    for o in outcomes:
        by_channel[o.request.channel][o.answer.status] += 1
    statuses: Counter[int | None] = Counter(o.answer.status for o in outcomes)
    latencies = sorted(o.answer.seconds for o in outcomes)
    sent = sum(len(o.request.body) + o.request.padding for o in outcomes)
    print(f"\nhostile input: seed {SEED}, {len(outcomes)} requests in {len(cases)} cases")
    print(
        f"duration {duration:.1f} s ({len(outcomes) / duration:.0f} requests/s), "
        f"{sent / 2**20:.0f} MiB of bodies, concurrency {CONCURRENCY}"
    )
    print(
        f"latency p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"p99 {latencies[int(len(latencies) * 0.99) - 1] * 1000:.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms"
    )
    print("answers by status:", dict(sorted(statuses.items(), key=lambda kv: str(kv[0]))))
    for channel in hostile.CHANNELS:
        counts = by_channel.get(channel, Counter())
        shown = ", ".join(f"{s}: {c}" for s, c in sorted(counts.items(), key=lambda kv: str(kv[0])))
        print(f"  {channel:<16} {sum(counts.values()):>5}  {shown}")
    print(f"runs created {n}; rows before → after (Δ, expected Δ):")
    for table in sorted(after):
        print(
            f"  {table:<30} {before.get(table, 0):>6} → {after[table]:>6} "
            f"({delta[table]:+}, expected {expected[table]:+})"
        )
    if queued_before is not None and target.queued is not None:
        queued = target.queued() - queued_before
        print(f"messages queued for runs: {queued} (runs created {n})")
    else:
        queued = None

    failures = [o for o in outcomes if o.problems]
    figures.update(
        {
            "requests": len(outcomes),
            "cases": len(cases),
            "seed": SEED,
            "concurrency": CONCURRENCY,
            "duration_s": round(duration, 1),
            "body_mib_sent": round(sent / 2**20, 1),
            "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
            "latency_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 1),
            "answers_by_status": {
                str(s): c for s, c in sorted(statuses.items(), key=lambda kv: str(kv[0]))
            },
            "answers_5xx": sum(c for s, c in statuses.items() if s is not None and s >= 500),
            "no_http_answer": statuses.get(None, 0),
            "answers_breaking_the_rules": len(failures),
            "runs_created": n,
            "rows_from_refused_requests": sum(
                abs(delta[t] - expected[t]) for t in delta if delta[t] != expected[t]
            ),
            "runs_no_answer_created": len(new_runs - created_set),
            "run_messages_queued": queued if queued is not None else "not read",
        }
    )

    # Verdict ----------------------------------------------------------------------------
    kinds: Counter[str] = Counter()
    for o in failures:
        kinds[f"{o.request.channel}/{o.request.kind.split('-')[0]} → {o.answer.status}"] += 1
    report = []
    shown_per_kind: Counter[str] = Counter()
    for o in failures:
        label = f"{o.request.channel}/{o.request.kind} → {o.answer.status}"
        shown_per_kind[label] += 1
        if shown_per_kind[label] > 2:
            continue
        report.append(
            f"{o.request.describe()}\n    answer {o.answer.status}: "
            f"{o.answer.body[:300]!r}\n    " + "\n    ".join(o.problems)
        )
    if failures:
        print(f"\n{len(failures)} answers broke the rules; by kind:")
        for label, count in kinds.most_common():
            print(f"  {count:>5}  {label}")
    assert len(created) == n, "an admission answer reported a run as created twice"
    problems = []
    if failures:
        problems.append(
            f"{len(failures)} of {len(outcomes)} answers broke the rules:\n\n"
            + "\n\n".join(report[:60])
        )
    if new_runs != created_set:
        problems.append(
            f"runs in the database that no answer created: {sorted(new_runs - created_set)[:20]}; "
            f"created but missing: {sorted(created_set - new_runs)[:20]}"
        )
    if delta != expected:
        wrong = {t: (delta[t], expected[t]) for t in delta if delta[t] != expected[t]}
        problems.append(f"rows written by refused requests (table: (Δ, expected Δ)): {wrong}")
    if queued is not None and queued != n:
        problems.append(f"{queued} run messages sent for {n} runs created")
    if problems:
        errors_logged = [
            line
            for line in target.logs().splitlines()
            if "Traceback" in line or "Error" in line or "error" in line
        ]
        print("server log lines about errors (last 40):", *errors_logged[-40:], sep="\n  ")
        pytest.fail("\n\n".join(problems), pytrace=False)
