"""The OpenAPI document against the real server: schemathesis generates requests for every
operation from ``GET /openapi.json`` and sends them to a real gunicorn over a real database.

Requests carry valid credentials — an admin API token, the project's Telegram and
Alertmanager secrets, Gitea and LINE signatures computed over each generated body — and
name real runs (pending, completed, in manual intervention, waiting for an approval whose
token is known), so they reach the code behind authentication instead of stopping at a 401.
Both schema-conforming and schema-violating requests are generated.

What must hold for every one: no 5xx, and the answer matches the document (status code,
content type, headers, body schema); a request that violates the document is refused with
a 4xx. Bounded and deterministic: ``EXAMPLES`` per operation, mode and choice of fixed
path parameters (about 1,200 requests, ~30 s on two cores), derandomized, no example
database — the same requests on every run.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import uuid
from collections import Counter
from typing import Any

import hypothesis
import pytest
import requests as http
import schemathesis
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import text

from awooop import secrets
from awooop.engine import management, runner
from tests.support import runs as test_runs
from tests.support import tokens

pytestmark = pytest.mark.slow

# Examples per strategy; an operation has one strategy per mode and fixed path parameters.
EXAMPLES = 12
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
# gunicorn's limit_request_line: a longer request line is refused by gunicorn itself (400,
# text/html) before the app sees it. Only requests violating the document get that long.
LIMIT_REQUEST_LINE = 4094


@dataclasses.dataclass(frozen=True)
class Target:
    """What generated requests are aimed at: the server, the project, its credentials."""

    base: str
    project: dict[str, Any]
    admin_token: str
    # The last segment of a run's path (``""``: the run itself) → runs to aim at.
    runs: dict[str, tuple[str, ...]]
    approval_token: str

    def headers(self, path: str) -> dict[str, str]:
        if path.endswith("/webhooks/telegram"):
            return {"X-Telegram-Bot-Api-Secret-Token": self.project["secrets"]["telegram"]}
        if path.endswith("/webhooks/alertmanager"):
            return {"Authorization": f"Bearer {self.project['secrets']['alertmanager']}"}
        return {"Authorization": f"Bearer {self.admin_token}"}

    def sign(self, path: str, raw: bytes) -> dict[str, str]:
        """The signature header a signed channel needs for exactly these body bytes."""
        for channel, header, encode in (
            ("gitea", "X-Gitea-Signature", bytes.hex),
            ("line", "X-Line-Signature", lambda d: base64.b64encode(d).decode()),
        ):
            if path.endswith(f"/webhooks/{channel}"):
                key = self.project["secrets"][channel].encode()
                return {header: encode(hmac.new(key, raw, hashlib.sha256).digest())}
        return {}

    def path_parameter_choices(self, path: str) -> list[dict[str, str]]:
        """Fixed path parameters, one strategy each: the project with each real run, or the
        known approval token, or neither; and nothing fixed at all."""
        if "{project_id}" not in path:
            return [{}]
        fixed = {"project_id": self.project["project_id"]}
        if "{run_id}" in path:
            segment = path.rsplit("}", 1)[1].lstrip("/")
            return [*({**fixed, "run_id": r} for r in self.runs[segment]), fixed, {}]
        if "{token}" in path:
            return [{**fixed, "token": self.approval_token}, fixed, {}]
        return [fixed, {}]


def send(target: Target, case: schemathesis.Case, session: http.Session) -> int:
    """Send one case with the target's credentials (unless the case is about leaving them
    out) and check the answer; its status."""
    path = case.operation.path
    authenticated = not case.operation.schema.is_security_param_negated(case)
    headers = target.headers(path) if authenticated else {}
    kwargs = case.as_transport_kwargs(base_url=target.base, headers=headers)
    if "/webhooks/" in path:
        # Serialize the body here, so that the signature is computed over the bytes sent.
        raw = json.dumps(kwargs.pop("json")).encode() if "json" in kwargs else kwargs.get("data")
        if isinstance(raw, str):
            raw = raw.encode()
        kwargs["data"] = raw
        if authenticated:
            kwargs["headers"].update(target.sign(path, raw or b""))
    response = session.request(**kwargs, timeout=10)
    if request_line_length(kwargs) > LIMIT_REQUEST_LINE:
        assert response.status_code == 400, "gunicorn refuses a request line this long"
    else:
        case.validate_response(response, checks=CHECKS, headers=dict(kwargs["headers"]))
    return response.status_code


def request_line_length(kwargs: dict[str, Any]) -> int:
    request = http.Request(kwargs["method"], kwargs["url"], params=kwargs.get("params"))
    return len(f"{kwargs['method']} {request.prepare().path_url} HTTP/1.1")


def fuzz(
    target: Target, operation: Any, session: http.Session, statuses: Counter[int]
) -> str | None:
    """Run one operation's examples, counting answers by status; the failure, if any."""
    strategies = [
        operation.as_strategy(generation_mode=mode, path_parameters=fixed)
        for mode in MODES
        for fixed in target.path_parameter_choices(operation.path)
    ]

    @hypothesis.settings(
        max_examples=EXAMPLES * len(strategies),
        deadline=None,
        derandomize=True,
        database=None,
        phases=[hypothesis.Phase.generate, hypothesis.Phase.shrink],
        suppress_health_check=list(hypothesis.HealthCheck),
        print_blob=False,
    )
    @hypothesis.given(case=st.one_of(strategies))
    def examples(case: schemathesis.Case) -> None:
        statuses[send(target, case, session)] += 1

    try:
        examples()
    except (Exception, BaseExceptionGroup) as failure:  # schemathesis: a BaseExceptionGroup
        # Every operation runs; all failures are reported together.
        return f"{operation.method.upper()} {operation.path}: {failure}"
    return None


@pytest.fixture
def target(stack, engine, project, settings, tmp_path) -> Target:
    """The server, and runs in the states each operation acts on, driven in this process:
    each management operation gets runs of its own, so that one operation's effect does not
    leave nothing for the next to do."""
    project_id = project["project_id"]

    def run(workflow: str = "noop-3", execute: bool = True, **event: Any) -> str:
        run_id = test_runs.admit(engine, project_id, workflow, event or None)
        if execute:
            runner.execute(engine, settings, run_id)
        return str(run_id)

    def paused() -> str:
        run_id = run(execute=False)
        management.operate(
            engine, settings, "pause", project_id, run_id, operation_id="setup", actor="test"
        )
        return run_id

    def stuck_in_compensation() -> str:
        fixed = tmp_path / f"fixed-{uuid.uuid4().hex}"
        run_id = run("test-undo-needs-fix", fixed=str(fixed))
        fixed.touch()  # the compensation can succeed when retried
        return run_id

    waiting = run("test-approval")
    # The approval's token is only ever sent out in the prompt: give it one we know.
    approval_token = secrets.new_token()
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE awooop_approval SET token_hash = :hash WHERE run_id = :run_id"),
            {"hash": secrets.sha256_hex(approval_token), "run_id": waiting},
        )
    reads = (run(), run("test-saga"), waiting)
    runs = {
        "": reads,
        "events": reads,
        "tool-results": (run("test-tool"), run(execute=False)),
        "pause": (run(execute=False), run("test-halt")),
        "resume": (paused(),),
        "cancel": (run(execute=False), run("test-tool")),
        "retry-compensation": (stuck_in_compensation(),),
        "retry-resolution": (run("test-no-resolver"),),
        "manual-close": (run("test-halt"),),
        "rerun": (run(), run("test-fail"), run(execute=False)),
    }
    stack.env["AWOOOP_MANUAL_CLOSE_ENABLED"] = "1"
    _, base = stack.web()
    return Target(
        base=base,
        project=project,
        admin_token=tokens.add(engine, project_id, "admin"),
        runs=runs,
        approval_token=approval_token,
    )


@pytest.mark.timeout(300)  # ~30 s alone; room for a machine shared with other test runs
def test_generated_requests_get_no_server_error_and_answers_match_the_document(target):
    # Loaded as a document, not from its URL: schemathesis leaves out the operation that
    # served the document it loaded from, and GET /openapi.json is one of ours.
    document = http.get(f"{target.base}/openapi.json", timeout=10).json()
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == sum(len(item) for item in document["paths"].values())

    statuses: dict[str, Counter[int]] = {}
    with http.Session() as session:
        failures = []
        for operation in operations:
            label = f"{operation.method.upper()} {operation.path}"
            statuses[label] = Counter()
            failures.append(fuzz(target, operation, session, statuses[label]))

    print("answers by status:", json.dumps(statuses, sort_keys=True))
    found = [f for f in failures if f is not None]
    if found:
        pytest.fail("\n\n".join(found), pytrace=False)
