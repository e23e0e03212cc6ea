"""Every command the README and docs/*.md show works as written.

A documented command is each command line of a ```sh block (continuation lines and quoted
arguments over several lines joined, comments dropped) and each inline `awooop …` or
`make …` span of the prose. ``STEPS`` lists exactly those, and says how each is checked:
a command added to the docs fails ``test_every_documented_command_is_listed`` until it has
a step here, and a session fails when it has not run every step of its own.

Two sessions, each a bash shell whose variables carry from one command to the next:

- **checkout** (the README): a directory with ``.venv`` and the ``.awooop/env`` that
  ``awooop dev up`` writes, and no AWOOOP_* variable in the environment — the ``awooop``
  command must find the file itself, as it must beside a running ``make run``; web and
  worker run as ``make run`` starts them, over the test's database and broker;
- **deployment** (docs/operations.md, then approvals.md and workflows.md): the exports of
  operations.md in a shell with ``awooop`` on PATH and no checkout.

What a command cannot have as written is replaced, and each replacement is listed with its
step: the web's address (a free port, not 8000, so this runs beside a ``make run``; the
example hosts awooop.example.com, db and redis) and the example ids and placeholders the
docs show (``a6610ada-…``, ``<run_id>``, ``<p>``). Variables a reader is assumed to hold
(``$RUN``, ``$OPERATOR_TOKEN``, ``$TELEGRAM_BOT_TOKEN``…) are set from what the commands
before printed, or made for them (a run stuck in compensation, a waiting approval). A
command named in the prose without its arguments is checked with ``--help``; make targets
with ``make -n`` (running them is this suite, the benchmarks or twenty minutes of chaos).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from awooop import devstack, secrets
from tests.support import db, debian_tools
from tests.support import runs as test_runs
from tests.support.processes import BIN, ROOT, wait_until

pytestmark = pytest.mark.slow

# --- What the docs show -------------------------------------------------------------------

DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SHELL_BLOCK = re.compile(r"^```(?:sh|bash|shell|console)\n(.*?)^```", re.S | re.M)
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# A Python block that is a file the reader saves: its first line names it.
FILE_BLOCK = re.compile(r"# (\w+\.py)\n")
ANY_BLOCK = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")
INLINE_COMMAND = re.compile(r"(?:[A-Z_]+=\S+ )*(?:\.venv/bin/)?(?:awooop|make) \S.*")


def normal(command: str) -> str:
    """A command with its line continuations joined and its whitespace collapsed."""
    return " ".join(command.replace("\\\n", " ").split())


def _cut_comment(line: str, quote: str | None) -> tuple[str, str | None]:
    """``line`` without a trailing ``# comment`` (outside quotes); the quote still open."""
    escaped = False
    for i, c in enumerate(line):
        if escaped:
            escaped = False
        elif c == "\\" and quote != "'":
            escaped = True
        elif quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), quote
    return line.rstrip(), quote


def block_commands(block: str) -> list[str]:
    """The commands of a shell block, each as written (several lines when continued)."""
    commands: list[str] = []
    lines: list[str] = []
    quote: str | None = None
    for line in block.splitlines():
        if not lines and (not line.strip() or line.lstrip().startswith("#")):
            continue
        code, quote = _cut_comment(line, quote)
        lines.append(code)
        if quote is None and not code.endswith("\\"):
            commands.append("\n".join(lines))
            lines = []
    assert not lines, f"a command in the docs does not end: {lines}"
    return commands


def documented() -> dict[str, str]:
    """Every documented command (normalised) -> its text as written (first occurrence)."""
    found: dict[str, str] = {}
    for doc in DOCS:
        page = doc.read_text()
        for block in SHELL_BLOCK.finditer(page):
            for command in block_commands(block.group(1)):
                found.setdefault(normal(command), command)
        for span in INLINE_SPAN.finditer(ANY_BLOCK.sub("", page)):
            command = normal(span.group(1))
            if INLINE_COMMAND.fullmatch(command):
                found.setdefault(command, command)
    return found


# --- Running them -------------------------------------------------------------------------


@dataclass(frozen=True)
class Done:
    returncode: int
    out: str
    err: str

    def printed(self) -> str:
        """Its exit status and the end of what it printed, for a failure's message."""
        return f"exit {self.returncode}\nstdout: {self.out[-2000:]}\nstderr: {self.err[-2000:]}"

    def json(self) -> Any:
        assert self.returncode == 0, f"exit {self.returncode}: {self.err}"
        return json.loads(self.out)

    def json_answered(self, status: int) -> Any:
        """The body of a ``curl -w ' %{http_code}\\n'`` that answered ``status``."""
        body, code = self.out.rsplit(" ", 1)
        assert (self.returncode, code) == (0, f"{status}\n"), self.printed()
        return json.loads(body)


class Shell:
    """A bash session: each command runs in a fresh bash, its exported variables carried
    to the next (``set -a``, so ``TOKEN=$(…)`` is kept as a reader's shell keeps it)."""

    _BASH_OWN = {"_", "SHLVL", "PWD", "OLDPWD", "__rc"}

    def __init__(self, cwd: Path, env: dict[str, str], scratch: Path):
        self.cwd = cwd
        self.env = env
        self.scratch = scratch
        self._dump = scratch / f"env-{uuid.uuid4().hex}"

    def __call__(self, command: str) -> Done:
        script = f'set -a\n{command}\n__rc=$?\nenv -0 > "{self._dump}"\nexit $__rc\n'
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if self._dump.exists():
            pairs = (item.partition("=") for item in self._dump.read_text().split("\0") if item)
            self.env = {k: v for k, _, v in pairs if k not in self._BASH_OWN}
            self._dump.unlink()
        return Done(done.returncode, done.stdout, done.stderr)


def user_env(**extra: str) -> dict[str, str]:
    """A reader's environment: nothing of AwoooP's configuration, the venv's commands on
    PATH (an activated venv, or the installed package)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AWOOOP_")
        and k not in ("PROMETHEUS_MULTIPROC_DIR", "FLOWER_BASIC_AUTH")
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


# --- The steps ------------------------------------------------------------------------------

Check = Callable[[Done, dict[str, Any]], None]


@dataclass(frozen=True)
class Step:
    session: str  # "checkout", "deployment" or "make"
    check: Check | None = None
    # (documented text, what runs instead); "{name}" is filled from the session's context.
    replace: tuple[tuple[str, str], ...] = ()
    # Named in the prose without its arguments: its --help must work.
    help_only: bool = False
    # Run again until the check passes (a run finishing), for at most this long.
    retry_for: float = 0.0
    # A long-running process (a worker, beat): started in the background, checked to serve
    # its metrics on the port the context names, then stopped.
    serves_metrics_on: str = ""
    # A long-running process checked otherwise: "log:<text>" (a line its output must show) or
    # "http:<path>" (the web answers 200 there on the context's "port"); then stopped.
    starts_when: str = ""


def json_with(**expected: Any) -> Check:
    def check(done: Done, ctx: dict[str, Any]) -> None:
        answer = done.json()
        for key, value in expected.items():
            assert answer[key] == (value.format(**ctx) if isinstance(value, str) else value), answer

    return check


def out_has(*needles: str) -> Check:
    def check(done: Done, ctx: dict[str, Any]) -> None:
        assert done.returncode == 0, done.err
        for needle in needles:
            assert needle.format(**ctx) in done.out, done.out

    return check


def exported(name: str, pattern: str) -> Check:
    def check(done: Done, ctx: dict[str, Any]) -> None:
        assert done.returncode == 0, done.err
        assert re.fullmatch(pattern, ctx["shell"].env.get(name, "")), name

    return check


def helps(done: Done, ctx: dict[str, Any]) -> None:
    assert done.returncode == 0 and done.out.startswith("usage: awooop"), done.out + done.err


def created_project(done: Done, ctx: dict[str, Any]) -> None:
    answer = done.json()
    assert answer["project_id"] == "ops" and len(answer["api_token"]) == 43
    assert set(answer["secrets"]) == {"telegram", "alertmanager", "gitea", "line"}
    ctx["ops"] = answer


def stored(kind: str) -> Check:
    return json_with(project_id="ops", stored=kind)


def made_token(role: str) -> Check:
    def check(done: Done, ctx: dict[str, Any]) -> None:
        answer = done.json()
        assert (answer["project_id"], answer["role"], len(answer["api_token"])) == ("ops", role, 43)

    return check


def routes(**expected: str) -> Check:
    def check(done: Done, ctx: dict[str, Any]) -> None:
        assert done.json()["routes"].items() >= expected.items()

    return check


def unrouted(channel: str) -> Check:
    def check(done: Done, ctx: dict[str, Any]) -> None:
        assert channel not in done.json()["routes"]

    return check


def project_config(**expected: Any) -> Check:
    def check(done: Done, ctx: dict[str, Any]) -> None:
        assert done.json()["config"].items() >= expected.items()

    return check


def limits(**expected: int | None) -> Check:
    def check(done: Done, ctx: dict[str, Any]) -> None:
        answer = done.json()["limits"]
        for key, value in expected.items():
            assert answer.get(key) == value, answer

    return check


def first_event(done: Done, ctx: dict[str, Any]) -> None:
    answer = done.json_answered(202)
    assert answer["status"] == "PENDING", answer
    ctx["run_id"] = answer["run_id"]


def run_completed(done: Done, ctx: dict[str, Any]) -> None:
    answer = done.json()
    assert answer["run_id"] == ctx["run_id"]
    assert (answer["status"], answer["attempt_count"]) == ("COMPLETED", 1), answer
    assert answer["saga_steps"]


def listed_runs(done: Done, ctx: dict[str, Any]) -> None:
    assert ctx["shell"].env["RUN"] in [r["run_id"] for r in done.json()["runs"]]


def the_run(done: Done, ctx: dict[str, Any]) -> None:
    answer = done.json()
    assert (answer["run_id"], answer["saga_status"]) == (
        ctx["shell"].env["RUN"],
        "MANUAL_INTERVENTION",
    )


def its_events(done: Done, ctx: dict[str, Any]) -> None:
    kinds = {event["kind"] for event in done.json()["events"]}
    assert "transition" in kinds, kinds


def retried(done: Done, ctx: dict[str, Any]) -> None:
    answer = done.json()
    assert (answer["run_id"], answer["operation"], answer["applied"]) == (
        ctx["shell"].env["RUN"],
        "retry_compensation",
        True,
    ), answer
    assert answer["version"] > int(ctx["shell"].env["VERSION"])


def parked_listed(done: Done, ctx: dict[str, Any]) -> None:
    assert {m["message_id"] for m in done.json()} == set(ctx["parked"])


def telegram_webhook_set(done: Done, ctx: dict[str, Any]) -> None:
    """The bot's webhook points at the project, with its secret and the updates read."""
    assert done.returncode == 0 and json.loads(done.out)["ok"] is True, done.out + done.err
    call = ctx["telegram"].calls[-1]
    assert call.path == "/bot123456:doc-bot-token/setWebhook", call.path
    form = call.body.decode()
    for value in (
        "https://awooop.example.com/v1/projects/ops/webhooks/telegram",
        ctx["ops"]["secrets"]["telegram"],
        '["message", "callback_query"]',
    ):
        assert value in form, form


def version_printed(done: Done, ctx: dict[str, Any]) -> None:
    from awooop import __version__

    assert done.returncode == 0 and done.out == f"awooop {__version__}\n", done.out + done.err


def revoked(done: Done, ctx: dict[str, Any]) -> None:
    assert done.json() == {"credential_id": ctx["credential_id"], "revoked": True}


def generated_secret(done: Done, ctx: dict[str, Any]) -> None:
    answer = done.json()
    assert answer.items() >= {"project_id": "ops", "stored": "webhook:signing"}.items()
    assert answer["secret"].startswith("whsec_")
    ctx.setdefault("webhook_secrets", []).append(answer["secret"])


def old_webhook_secret(done: Done, ctx: dict[str, Any]) -> None:
    """The credentials after a second --generate: the older webhook:signing one is revoked."""
    rows = [
        row
        for row in done.json()
        if (row["channel_type"], row["revoked_at"]) == ("webhook:signing", None)
    ]
    assert len(rows) == 2, rows
    ctx["credential_id"] = min(rows, key=lambda row: row["created_at"])["credential_id"]


def credentials_listed(done: Done, ctx: dict[str, Any]) -> None:
    rows = done.json()
    assert all("secret" not in key for row in rows for key in row)
    viewer = [row for row in rows if row["role"] == "viewer"]
    ctx["credential_id"] = viewer[0]["credential_id"]


def emptied_metrics(done: Done, ctx: dict[str, Any]) -> None:
    assert re.fullmatch(rf"removed \d+ metric file\(s\) from {ctx['metrics']}\n", done.out)
    assert list(Path(ctx["metrics"]).glob("*.db")) == []


def configuration_shown(done: Done, ctx: dict[str, Any]) -> None:
    assert done.returncode == 0, done.err
    lines = dict(line.partition("=")[::2] for line in done.out.splitlines())
    assert lines["AWOOOP_SECRET_KEY"].split() == ["***", "#", "env", "file", ctx["env_file"]]
    assert lines["AWOOOP_LEASE_TTL_SECONDS"].split() == ["300", "#", "default"]
    assert f"awooop: using {ctx['env_file']}" in done.err


def scheduled_run(workflow: str) -> Check:
    def check(done: Done, ctx: dict[str, Any]) -> None:
        runs = done.json()["runs"]
        assert any(r["workflow_name"] == workflow for r in runs), runs

    return check


def succeeds(done: Done, ctx: dict[str, Any]) -> None:
    assert done.returncode == 0, done.err


make_dry_run = succeeds


DEPLOYMENT_HOST = (("https://awooop.example.com", "{base}"),)
# The docs' "every interface" address, served on loopback here.
ALL_INTERFACES = ("0.0.0.0", "127.0.0.1")  # noqa: S104 - a string replaced, nothing bound

STEPS: dict[str, Step] = {
    # --- README: make targets -------------------------------------------------------------
    "make run": Step("make", make_dry_run),
    "make test": Step("make", make_dry_run),
    "make stop": Step("make", make_dry_run),
    "make lint": Step("make", make_dry_run),
    "make test-integration": Step("make", make_dry_run),
    "make bench": Step("make", make_dry_run),
    "make bench-peers": Step("make", make_dry_run),
    "make bench-capacity": Step("make", make_dry_run),
    "make bench-growth": Step("make", make_dry_run),
    "make pgbouncer": Step("make", make_dry_run),
    "make haproxy": Step("make", make_dry_run),
    "make patroni": Step("make", make_dry_run),
    "make chaos": Step("make", make_dry_run),
    "AWOOOP_CHAOS_SCALE=0.2 make chaos": Step("make", make_dry_run),
    "make browser": Step("make", make_dry_run),
    "make bench-retention": Step("make", make_dry_run),
    "make test-wheel": Step("make", make_dry_run),
    "AWOOOP_WHEEL_PYTHON=python3.11 make test-wheel": Step("make", make_dry_run),
    "make PYTHON=python3.13 install": Step("make", make_dry_run),
    "make cluster": Step("make", make_dry_run),
    "make verify": Step("make", make_dry_run),
    "make spin": Step("make", make_dry_run),
    "make docs": Step("make", make_dry_run),
    "VERIFY_TRAIL=1 make verify": Step("make", make_dry_run),
    "AWOOOP_CLUSTER_SCALE=0.2 make cluster": Step("make", make_dry_run),
    "make cluster CLUSTER_ARGS='-k work_spreads'": Step("make", make_dry_run),
    # --- README: a make run checkout ------------------------------------------------------
    """TOKEN=$(python3 -c "import json; print(json.load(open('.awooop/demo-project.json'))"""
    """['api_token'])")""": Step("checkout", exported("TOKEN", r"[\w-]{43}")),
    """curl -s -w ' %{http_code}\\n' -X POST http://127.0.0.1:8000/v1/projects/demo/runs -H """
    """"Authorization: Bearer """
    """$TOKEN" -H 'Idempotency-Key: first-event-1' -H 'Content-Type: application/json' -d """
    """'{"summary": "disk almost full on db-1"}'""": Step(
        "checkout", first_event, replace=(("http://127.0.0.1:8000", "{base}"),)
    ),
    """curl -s http://127.0.0.1:8000/v1/projects/demo/runs/<run_id> -H "Authorization: """
    """Bearer $TOKEN\"""": Step(
        "checkout",
        run_completed,
        replace=(("http://127.0.0.1:8000", "{base}"), ("<run_id>", "{run_id}")),
        retry_for=30,
    ),
    ".venv/bin/awooop project create ops": Step("checkout", created_project),
    ".venv/bin/awooop project routes ops alertmanager=demo-alertmanager api=noop-3": Step(
        "checkout", routes(alertmanager="demo-alertmanager", api="noop-3")
    ),
    ".venv/bin/awooop workflows": Step("checkout", out_has("noop-3 v1", "demo-alertmanager")),
    ".venv/bin/awooop project limits ops max_active_runs=100 ingress_per_minute=6000 "
    "management_per_minute=60": Step(
        "checkout",
        limits(max_active_runs=100, ingress_per_minute=6000, management_per_minute=60),
    ),
    ".venv/bin/awooop project limits ops ingress_per_minute=none": Step(
        "checkout", limits(max_active_runs=100, ingress_per_minute=None)
    ),
    "awooop project config <p> actions_url=https://…": Step(
        "checkout",
        project_config(actions_url="https://automation.example"),
        replace=(("<p>", "ops"), ("https://…", "https://automation.example")),
    ),
    "awooop project create": Step("checkout", helps, help_only=True),
    "awooop project token <p> --role viewer": Step(
        "checkout", made_token("viewer"), replace=(("<p>", "ops"),)
    ),
    # `make run` runs it; here it would start embedded servers in the test's checkout.
    "awooop dev up": Step("checkout", helps, help_only=True),
    "awooop config": Step("checkout", configuration_shown),
    # --- docs/operations.md: a deployment -------------------------------------------------
    "export AWOOOP_DATABASE_URL=postgresql+psycopg2://awooop:…@db:5432/awooop": Step(
        "deployment",
        exported("AWOOOP_DATABASE_URL", r"postgresql\+psycopg2://.+"),
        replace=(("postgresql+psycopg2://awooop:…@db:5432/awooop", "{database_url}"),),
    ),
    "export AWOOOP_BROKER_URL=redis://redis:6379/0": Step(
        "deployment",
        exported("AWOOOP_BROKER_URL", r"redis://.+"),
        replace=(("redis://redis:6379/0", "{broker_url}"),),
    ),
    "export AWOOOP_SECRET_KEY=$(awooop dev key)": Step(
        "deployment", exported("AWOOOP_SECRET_KEY", r"[\w-]{43}=")
    ),
    # --- docs/operations.md: rotating the secret key (at the end of the deployment's session) -
    'AWOOOP_SECRET_KEY="$(awooop dev key),$AWOOOP_SECRET_KEY"': Step(
        "deployment", exported("AWOOOP_SECRET_KEY", r"[\w-]{43}=,[\w-]{43}=")
    ),
    "awooop secrets reencrypt": Step(
        "deployment",
        out_has(
            "credentials: ",
            " re-encrypted with the newest key, 0 already were, 0 open with no key",
            "outbox messages: ",
        ),
    ),
    'AWOOOP_SECRET_KEY="${AWOOOP_SECRET_KEY%%,*}"': Step(
        "deployment", exported("AWOOOP_SECRET_KEY", r"[\w-]{43}=")
    ),
    "awooop secrets check": Step(
        "deployment", out_has("under the newest key, 0 under an older key, 0 open with no key")
    ),
    "export AWOOOP_PUBLIC_BASE_URL=https://awooop.example.com": Step(
        "deployment", exported("AWOOOP_PUBLIC_BASE_URL", "https://awooop.example.com")
    ),
    # --- docs/operations.md: behind PgBouncer (here straight to the test's database, which the
    # plain statements and server-side timeouts work on as well) ------------------------------
    "export AWOOOP_DATABASE_URL=postgresql+psycopg2://awooop@pgbouncer:6432/awooop": Step(
        "deployment",
        exported("AWOOOP_DATABASE_URL", r"postgresql\+psycopg2://.+"),
        replace=(("postgresql+psycopg2://awooop@pgbouncer:6432/awooop", "{database_url}"),),
    ),
    "export AWOOOP_DATABASE_PREPARED_STATEMENTS=false": Step(
        "deployment", exported("AWOOOP_DATABASE_PREPARED_STATEMENTS", "false")
    ),
    "export AWOOOP_DATABASE_SESSION_OPTIONS=false": Step(
        "deployment", exported("AWOOOP_DATABASE_SESSION_OPTIONS", "false")
    ),
    "export PROMETHEUS_MULTIPROC_DIR=/var/lib/awooop/metrics": Step(
        "deployment",
        exported("PROMETHEUS_MULTIPROC_DIR", ".+"),
        replace=(("/var/lib/awooop/metrics", "{metrics}"),),
    ),
    """export FLOWER_BASIC_AUTH="ops:$(python3 -c 'import secrets; """
    """print(secrets.token_urlsafe(24))')\"""": Step(
        "deployment", exported("FLOWER_BASIC_AUTH", r"ops:[\w-]{32}")
    ),
    "awooop migrate": Step("deployment", succeeds),
    "awooop metrics reset": Step("deployment", emptied_metrics),
    "awooop project create ops": Step("deployment", created_project),
    "awooop project token ops --role viewer": Step("deployment", made_token("viewer")),
    "awooop project token ops --role admin": Step("deployment", made_token("admin")),
    "awooop project routes ops alertmanager=alert-triage telegram=chatops line=chatops": Step(
        "deployment", routes(alertmanager="alert-triage", telegram="chatops", line="chatops")
    ),
    "awooop project config ops actions_url=https://automation.example "
    "approvers=telegram:777000111 notify_telegram_chat=-1001234567890": Step(
        "deployment",
        project_config(
            actions_url="https://automation.example",
            approvers={"telegram": ["777000111"], "line": []},
            notify_telegram_chat="-1001234567890",
        ),
    ),
    "printenv TELEGRAM_BOT_TOKEN | awooop project outbound ops telegram": Step(
        "deployment", stored("telegram:bot")
    ),
    "awooop project limits ops max_active_runs=200 ingress_per_minute=6000 "
    "management_per_minute=60": Step(
        "deployment",
        limits(max_active_runs=200, ingress_per_minute=6000, management_per_minute=60),
    ),
    "awooop project credentials ops": Step("deployment", credentials_listed),
    "awooop project revoke ops <credential id>": Step(
        "deployment", revoked, replace=(("<credential id>", "{credential_id}"),)
    ),
    "awooop project token": Step("deployment", helps, help_only=True),
    "awooop project outbound": Step("deployment", helps, help_only=True),
    "awooop project outbound …": Step("deployment", helps, help_only=True, replace=((" …", ""),)),
    "awooop outbox list --status PARKED": Step("deployment", parked_listed),
    "awooop outbox retry <message id>": Step(
        "deployment",
        json_with(message_id="{parked_0}", status="PENDING"),
        replace=(("<message id>", "{parked_0}"),),
    ),
    """T="Authorization: Bearer $OPERATOR_TOKEN"; P=https://awooop.example.com/v1/projects/"""
    """ops""": Step(
        "deployment",
        exported("P", r"http://127\.0\.0\.1:\d+/v1/projects/ops"),
        replace=DEPLOYMENT_HOST,
    ),
    'curl -s -H "$T" "$P/interventions"': Step("deployment", listed_runs),
    'curl -s -H "$T" "$P/runs?status=WAITING_APPROVAL,PENDING&limit=20"': Step(
        "deployment", listed_runs
    ),
    'curl -s -H "$T" "$P/runs/$RUN"': Step("deployment", the_run),
    'curl -s -H "$T" "$P/runs/$RUN/events"': Step("deployment", its_events),
    "OPERATION=$(python3 -c 'import uuid; print(uuid.uuid4())')": Step(
        "deployment", exported("OPERATION", r"[0-9a-f-]{36}")
    ),
    """curl -s -X POST -H "$T" -H 'Content-Type: application/json' -H "If-Match: \\"$VERSION"""
    """\\"" -d "{\\"operation_id\\": \\"$OPERATION\\", \\"reason\\": \\"rollback fixed by """
    """hand\\"}" "$P/runs/$RUN/retry-compensation\"""": Step("deployment", retried),
    # --- docs/approvals.md ----------------------------------------------------------------
    "awooop project config ops approvers=telegram:777000111,line:U4af4980629...": Step(
        "deployment",
        project_config(approvers={"telegram": ["777000111"], "line": ["U4af4980629..."]}),
    ),
    "awooop project config ops notify_telegram_chat=-1001234567890 "
    "notify_url=https://hooks.example/awooop": Step(
        "deployment",
        project_config(
            notify_telegram_chat="-1001234567890", notify_url="https://hooks.example/awooop"
        ),
    ),
    "printenv LINE_CHANNEL_ACCESS_TOKEN | awooop project outbound ops line": Step(
        "deployment", stored("line:access")
    ),
    "printenv GITEA_TOKEN | awooop project outbound ops gitea": Step(
        "deployment", stored("gitea:token")
    ),
    "awooop project outbound ops webhook --generate": Step("deployment", generated_secret),
    # --- docs/providers.md ----------------------------------------------------------------
    "printenv LINE_CHANNEL_SECRET | awooop project inbound ops line": Step(
        "deployment", json_with(project_id="ops", stored="line")
    ),
    "awooop project config ops gitea_url=https://gitea.example.com": Step(
        "deployment", project_config(gitea_url="https://gitea.example.com")
    ),
    "awooop project routes ops gitea=": Step("deployment", unrouted("gitea")),
    """curl -s "https://api.telegram.org/bot$TELEGRAM_BOT_TOKEN/setWebhook" -F """
    """"url=https://awooop.example.com/v1/projects/ops/webhooks/telegram" -F """
    """"secret_token=$TELEGRAM_SECRET" -F 'allowed_updates=["message", "callback_query"]'""": Step(
        "deployment",
        lambda done, ctx: telegram_webhook_set(done, ctx),
        replace=(("https://api.telegram.org", "{telegram_api}"),),
    ),
    "awooop project inbound": Step("local", succeeds, help_only=True),
    "awooop project revoke": Step("local", succeeds, help_only=True),
    "awooop --version": Step("local", lambda done, ctx: version_printed(done, ctx)),
    # --- README: a first workflow ------------------------------------------------------------
    ".venv/bin/pytest -q test_restart_service.py": Step("checkout", out_has("2 passed")),
    "export PYTHONPATH=$PWD AWOOOP_WORKFLOW_MODULES=restart_service": Step(
        "checkout", exported("AWOOOP_WORKFLOW_MODULES", "restart_service")
    ),
    ".venv/bin/awooop project workflows demo --allow restart-service": Step(
        "checkout", out_has("restart-service")
    ),
    '.venv/bin/awooop runs start demo restart-service --input \'{"service": "web"}\' '
    "--key restart-web-1 --token $TOKEN --wait": Step(
        "checkout",
        out_has("COMPLETED", "restarted web"),
        replace=(("--wait", "--wait --url {base}"),),
        # Right after the allow, as pasted: the web read the project's settings moments
        # before (the first event), and a start they would refuse is checked again.
    ),
    "awooop project config ops notify_url=https://hooks.example/awooop": Step(
        "deployment", project_config(notify_url="https://hooks.example/awooop")
    ),
    "awooop project revoke ops <old credential id>": Step(
        "deployment", revoked, replace=(("<old credential id>", "{credential_id}"),)
    ),
    """curl -X POST https://awooop.example/v1/projects/ops/approvals/$APPROVAL_TOKEN -H """
    """"Authorization: Bearer $OPERATOR_TOKEN" -H 'Content-Type: application/json' -d """
    """'{"decision": "approve", "actor": "alice", "comment": "change window open", "run_id": """
    """"a6610ada-184f-4133-a4cd-aba1256e5458", "step": "approve"}'""": Step(
        "deployment",
        json_with(status="approved", run_id="{approval_run}"),
        replace=(
            ("https://awooop.example", "{base}"),
            ("a6610ada-184f-4133-a4cd-aba1256e5458", "{approval_run}"),
        ),
    ),
    "awooop outbox retry ID": Step(
        "deployment",
        json_with(message_id="{parked_1}", status="PENDING"),
        replace=((" ID", " {parked_1}"),),
    ),
    # --- docs/workflows.md ----------------------------------------------------------------
    """curl -X POST http://127.0.0.1:8000/v1/projects/ops/runs/$RUN_ID/tool-results -H """
    """"Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"event_id": """
    """"diag-42", "step": "diagnose", "status": "succeeded", "output": {"disk": "97%"}}'""": Step(
        "deployment",
        json_with(status="accepted"),
        replace=(("http://127.0.0.1:8000", "{base}"),),
    ),
    "awooop workflows": Step("deployment", out_has("alert-triage v", "chatops v")),
    "awooop project routes ops alertmanager=alert-triage": Step(
        "deployment", routes(alertmanager="alert-triage")
    ),
    "awooop project config ops actions_url=https://automation.example": Step(
        "deployment", project_config(actions_url="https://automation.example")
    ),
    "awooop project routes ops telegram=chatops line=chatops": Step(
        "deployment", routes(telegram="chatops", line="chatops")
    ),
    # --- docs/workflows.md: the tutorial, in a make run checkout ----------------------------
    ".venv/bin/pytest -q test_disk_cleanup.py": Step("tutorial", out_has("3 passed")),
    "export PYTHONPATH=$PWD AWOOOP_WORKFLOW_MODULES=disk_cleanup": Step(
        "tutorial", exported("AWOOOP_WORKFLOW_MODULES", "disk_cleanup")
    ),
    """export AWOOOP_API_TOKEN=$(python3 -c "import json; print(json.load(open('.awooop/"""
    """demo-project.json'))['api_token'])")""": Step(
        "tutorial", exported("AWOOOP_API_TOKEN", r"[\w-]{43}")
    ),
    ".venv/bin/awooop project workflows demo --allow disk-cleanup disk-report": Step(
        "tutorial", json_with(allowed_workflows=["disk-cleanup", "disk-report"])
    ),
    """.venv/bin/awooop runs start demo disk-cleanup --input '{"host": "web-3"}' --key """
    """cleanup-web-3""": Step("tutorial", out_has("started run ", "(PENDING)")),
    """RUN=$(.venv/bin/awooop runs start demo disk-cleanup --input '{"host": "web-3"}' --key """
    """cleanup-web-3 --json | python3 -c "import json, sys; print(json.load(sys.stdin)"""
    """['run_id'])")""": Step("tutorial", exported("RUN", r"[0-9a-f-]{36}")),
    # the run has cleaned the host and waits for its signal
    ".venv/bin/awooop runs get demo $RUN": Step(
        "tutorial", out_has("PENDING", "disk-cleanup v1 at step confirm"), retry_for=30
    ),
    """curl -s -X POST http://127.0.0.1:8000/v1/projects/demo/runs/$RUN/signals/healthy -H """
    """"Authorization: Bearer $AWOOOP_API_TOKEN" -H 'Idempotency-Key: check-web-3' -H """
    """'Content-Type: application/json' -d '{"by": "alice"}'""": Step(
        "tutorial", json_with(status="delivered"), replace=(("http://127.0.0.1:8000", "{base}"),)
    ),
    ".venv/bin/python start_and_signal.py": Step(
        "tutorial", out_has("COMPLETED cleaned web-4, confirmed by bob")
    ),
    """curl -s "http://127.0.0.1:8000/v1/projects/demo/runs?channel=schedule" -H """
    """"Authorization: Bearer $AWOOOP_API_TOKEN\"""": Step(
        "tutorial",
        scheduled_run("disk-report"),
        replace=(("http://127.0.0.1:8000", "{base}"),),
        retry_for=60,
    ),
    # --- commands that need no service -------------------------------------------------------
    "awooop --help": Step("local", succeeds),
    "awooop dev down": Step("local", succeeds, help_only=True),
    "awooop dev run": Step("local", succeeds, help_only=True),
    "awooop outbox retry": Step("local", succeeds, help_only=True),
    "awooop project retention": Step("local", succeeds, help_only=True),
    # --- docs/configuration.md ----------------------------------------------------------------
    "awooop dev key": Step("local", succeeds),
    "awooop project limits": Step("local", succeeds, help_only=True),
    # --- docs/client.md (its examples are ```text; the Python one and the operator's
    # commands run in tests/e2e/test_client_processes.py) ------------------------------------
    "awooop project routes": Step("local", succeeds, help_only=True),
    "awooop project workflows": Step("local", succeeds, help_only=True),
    "awooop runs": Step("local", succeeds, help_only=True),
    "awooop runs start": Step("local", succeeds, help_only=True),
    "awooop runs get": Step("local", succeeds, help_only=True),
    "awooop runs list": Step("local", succeeds, help_only=True),
    "awooop runs show": Step("local", succeeds, help_only=True),
    "awooop runs rerun": Step("local", succeeds, help_only=True),
    "awooop approvals": Step("local", succeeds, help_only=True),
    "awooop approvals list": Step("local", succeeds, help_only=True),
    "awooop approvals decide": Step("local", succeeds, help_only=True),
    "awooop workers": Step("local", succeeds, help_only=True),
    # --- README / operations.md: a project's retention ---------------------------------------
    ".venv/bin/awooop project retention ops 90": Step(
        "checkout", json_with(project_id="ops", run_retention_days=90, effective_days=90)
    ),
    ".venv/bin/awooop project retention ops default": Step(
        "checkout", json_with(project_id="ops", run_retention_days=None, effective_days=30)
    ),
    "awooop project retention ops 90": Step(
        "deployment", json_with(project_id="ops", run_retention_days=90, effective_days=90)
    ),
    "pip install standardwebhooks": Step("local", succeeds),  # the test extra has it
    # --- README "Installing the package" ----------------------------------------------------
    "python3 -m venv /opt/awooop": Step(
        "install", succeeds, replace=(("/opt/awooop", "{prefix}"),)
    ),
    "/opt/awooop/bin/pip install .": Step(
        "install", succeeds, replace=(("/opt/awooop", "{prefix}"),)
    ),
    "python3 -m pip wheel --no-deps -w dist .": Step(
        "install", succeeds, replace=(("-w dist", "-w {dist}"),)
    ),
    "/opt/awooop/bin/pip install dist/awooop-*-py3-none-any.whl": Step(
        "install", succeeds, replace=(("/opt/awooop", "{prefix}"), ("dist/", "{dist}/"))
    ),
    "export PATH=/opt/awooop/bin:$PATH": Step(
        "install", succeeds, replace=(("/opt/awooop", "{prefix}"),)
    ),
    "gunicorn -c python:awooop.web.gunicorn_conf 'awooop.web.app:create_app()'": Step(
        "install", starts_when="http:/healthz"
    ),
    # (--quiet keeps the banner off; at INFO a started worker logs its "ready." line, after
    # the start-up check of the settings.)
    "celery -A awooop.tasks.app --quiet worker -Q runs,notifications -n worker@%h "
    "--loglevel INFO": Step("install", starts_when="log:ready."),
    "celery -A awooop.tasks.app --quiet worker -Q maintenance -n maintenance@%h "
    "--loglevel INFO": Step("install", starts_when="log:ready."),
    "mkdir -p /var/lib/awooop": Step(
        "install", succeeds, replace=(("/var/lib/awooop", "{state}"),)
    ),
    "AWOOOP_BEAT_SCHEDULE_FILE=/var/lib/awooop/celerybeat-schedule "
    "celery -A awooop.tasks.app --quiet beat --loglevel INFO": Step(
        "install", starts_when="log:beat: Starting", replace=(("/var/lib/awooop", "{state}"),)
    ),
    # --- README / operations.md: metrics on several hosts -----------------------------------
    "export PROMETHEUS_MULTIPROC_DIR=/run/awooop/metrics-worker": Step(
        "host", succeeds, replace=(("/run/awooop", "{run_dir}"),)
    ),
    "export AWOOOP_METRICS_PORT=9101 AWOOOP_METRICS_ADDRESS=0.0.0.0": Step(
        "host", succeeds, replace=(("9101", "{port_9101}"), ALL_INTERFACES)
    ),
    "celery -A awooop.tasks.app --quiet worker -Q runs,notifications --loglevel INFO -E": Step(
        "host", serves_metrics_on="port_9101"
    ),
    **{
        f"PROMETHEUS_MULTIPROC_DIR=/run/awooop/metrics-{name} AWOOOP_METRICS_PORT={port} "
        f"AWOOOP_METRICS_ADDRESS=0.0.0.0 {schedule}celery -A awooop.tasks.app --quiet {argv}": Step(
            "host",
            replace=(
                ("/run/awooop", "{run_dir}"),
                *((("/var/lib/awooop", "{run_dir}"),) if schedule else ()),
                (str(port), f"{{port_{port}}}"),
                ALL_INTERFACES,
            ),
            serves_metrics_on=f"port_{port}",
        )
        for name, port, schedule, argv in (
            ("worker", 9101, "", "worker -Q runs,notifications --loglevel INFO -E"),
            ("maintenance", 9102, "", "worker -Q maintenance --loglevel INFO -E"),
            (
                "beat",
                9103,
                "AWOOOP_BEAT_SCHEDULE_FILE=/var/lib/awooop/celerybeat-schedule ",
                "beat --loglevel INFO",
            ),
        )
    },
    # --- README / operations.md: the alert rules ------------------------------------------
    "make promtool": Step("make", make_dry_run),
    "promtool check config deploy/prometheus/prometheus.yml": Step("deploy", succeeds),
    "promtool check rules deploy/prometheus/awooop-alerts.yml": Step("deploy", succeeds),
    "promtool test rules deploy/prometheus/awooop-alerts.test.yml": Step("deploy", succeeds),
}


@dataclass
class Session:
    name: str
    shell: Shell
    ctx: dict[str, Any] = field(default_factory=dict)
    ran: set[str] = field(default_factory=set)

    def __call__(self, command: str) -> Done:
        step = STEPS[command]
        assert step.session == self.name, f"{command!r} belongs to {step.session}"
        text = documented()[command]
        for written, instead in step.replace:
            assert written in text, f"{written!r} is no longer in {command!r}"
            text = text.replace(written, instead.format(**self.ctx))
        if step.help_only:
            text = f"{text} --help"
        self.ctx["shell"] = self.shell
        if step.serves_metrics_on:
            port = self.ctx[step.serves_metrics_on]
            self._started(text, lambda log: _answers(port, "/metrics", b"awooop_"))
            self.ran.add(command)
            return Done(0, "", "")
        if step.starts_when:
            kind, _, what = step.starts_when.partition(":")
            if kind == "log":
                self._started(text, lambda log: what in log.read_text())
            else:
                self._started(text, lambda log: _answers(self.ctx["port"], what, b""))
            self.ran.add(command)
            return Done(0, "", "")

        tried: list[Done] = []

        def attempt() -> Done | None:
            done = self.shell(text)
            tried[:] = [done]
            if step.check is None:
                return done
            try:
                step.check(done, self.ctx)
            except (AssertionError, ValueError, KeyError):
                if step.retry_for:
                    return None
                raise AssertionError(f"{command!r} as run:\n{text}\n{done.printed()}") from None
            return done

        if step.retry_for:
            try:
                done = wait_until(attempt, step.retry_for, f"{command!r} to answer as documented")
            except AssertionError as timed_out:
                last = tried[0] if tried else Done(-1, "", "(no try ended)")
                raise AssertionError(f"{timed_out}; the last try: {last.printed()}") from None
        else:
            done = attempt()
        assert isinstance(done, Done)
        self.ran.add(command)
        return done

    def _started(self, text: str, ready: Callable[[Path], bool]) -> None:
        """Start ``text`` as a reader would (in the session's environment), wait until
        ``ready(its log file)``, then stop it (SIGTERM to its process group)."""
        log = self.shell.scratch / f"process-{uuid.uuid4().hex}.log"
        with open(log, "w") as out:
            process = subprocess.Popen(
                ["bash", "-c", text],
                cwd=self.shell.cwd,
                env=self.shell.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:

            def serving() -> bool:
                assert process.poll() is None, f"{text!r} exited:\n{log.read_text()[-3000:]}"
                return ready(log)

            wait_until(serving, 60, f"{text!r} to start")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)

    def assert_ran_all(self) -> None:
        mine = {command for command, step in STEPS.items() if step.session == self.name}
        assert mine - self.ran == set(), f"steps of {self.name} never run"


# --- The tests ------------------------------------------------------------------------------


def _answers(port: int, path: str, needle: bytes) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status == 200 and needle in r.read()
    except OSError:
        return False


def test_every_documented_command_is_listed():
    shown = set(documented())

    assert sorted(shown - set(STEPS)) == [], "documented commands no test runs: add a Step"
    assert sorted(set(STEPS) - shown) == [], "steps for commands the docs no longer show"


def test_make_targets_the_docs_name_exist(tmp_path):
    """``make -n``: each target exists and its recipe expands (nothing is run)."""
    session = Session("make", Shell(ROOT, user_env(), tmp_path))
    for command, step in STEPS.items():
        if step.session == "make":
            done = session.shell(command.replace("make ", "make -n ", 1))
            make_dry_run(done, session.ctx)
            session.ran.add(command)
    session.assert_ran_all()


@pytest.mark.timeout(300)
def test_the_readme_works_in_a_make_run_checkout(stack, settings, tmp_path):
    # Given a checkout as `make run` leaves it: the venv, the env file `awooop dev up`
    # writes (here over the test's database and broker), the demo project, web and worker
    checkout = tmp_path / "checkout"
    (checkout / ".awooop").mkdir(parents=True)
    (checkout / ".venv").symlink_to(ROOT / ".venv")
    env_file = checkout / ".awooop" / "env"
    devstack.write_env(
        env_file,
        {
            "AWOOOP_DATABASE_URL": settings.database_url,
            "AWOOOP_BROKER_URL": settings.broker_url,
            "AWOOOP_SECRET_KEY": settings.secret_key,
            "AWOOOP_BEAT_SCHEDULE_FILE": str(checkout / ".awooop" / "celerybeat-schedule"),
            "FLOWER_BASIC_AUTH": "admin:development-only",
            "PROMETHEUS_MULTIPROC_DIR": str(checkout / ".awooop" / "metrics"),
        },
    )
    session = Session("checkout", Shell(checkout, user_env(), tmp_path))
    demo = session.shell(".venv/bin/awooop dev demo")  # as `make run` does
    assert demo.returncode == 0 and "Demo project credentials" in demo.out, demo.err
    assert f"awooop: using {env_file}" in demo.err
    # The README's first workflow, saved as the reader saves it, and loaded by the processes
    # as `make run` with the README's two variables loads it
    readme_files = {
        m.group(1): block
        for block in PYTHON_BLOCK.findall((ROOT / "README.md").read_text())
        if (m := FILE_BLOCK.match(block))
    }
    assert set(readme_files) == {"restart_service.py", "test_restart_service.py"}
    for name, block in readme_files.items():
        (checkout / name).write_text(block)
    (checkout / "pyproject.toml").symlink_to(ROOT / "pyproject.toml")
    stack.env.update(
        PYTHONPATH=os.pathsep.join([str(checkout), str(ROOT)]),
        AWOOOP_WORKFLOW_MODULES="restart_service",
    )
    stack.worker()
    _, session.ctx["base"] = stack.web()
    session.ctx["env_file"] = str(env_file)

    # When a reader types the README's commands, Then each answers as the README says
    session(
        """TOKEN=$(python3 -c "import json; print(json.load(open('.awooop/demo-project.json'))"""
        """['api_token'])")"""
    )
    first = (
        """curl -s -w ' %{http_code}\\n' -X POST http://127.0.0.1:8000/v1/projects/demo/runs -H """
        """"Authorization: Bearer $TOKEN" -H 'Idempotency-Key: first-event-1' -H 'Content-Type: """
        """application/json' -d '{"summary": "disk almost full on db-1"}'"""
    )
    session(first)
    run_id = session.ctx["run_id"]
    # "the same request again -> {..., "code": "E-IDEMPOTENT-001"} 200, the same run_id"
    again = session.shell(documented()[first].replace("http://127.0.0.1:8000", session.ctx["base"]))
    answer = again.json_answered(200)
    assert (answer["run_id"], answer["code"]) == (run_id, "E-IDEMPOTENT-001")
    session(
        """curl -s http://127.0.0.1:8000/v1/projects/demo/runs/<run_id> -H "Authorization: """
        """Bearer $TOKEN\""""
    )
    # A first workflow: its test, then the run on the stack
    for command in (
        ".venv/bin/pytest -q test_restart_service.py",
        "export PYTHONPATH=$PWD AWOOOP_WORKFLOW_MODULES=restart_service",
        ".venv/bin/awooop project workflows demo --allow restart-service",
        '.venv/bin/awooop runs start demo restart-service --input \'{"service": "web"}\' '
        "--key restart-web-1 --token $TOKEN --wait",
    ):
        session(command)
    project = session(".venv/bin/awooop project create ops")
    assert f"awooop: using {env_file}" in project.err  # says which file it used
    session(".venv/bin/awooop project retention ops 90")
    session(".venv/bin/awooop project retention ops default")
    for command in (
        ".venv/bin/awooop project routes ops alertmanager=demo-alertmanager api=noop-3",
        ".venv/bin/awooop workflows",
        ".venv/bin/awooop project limits ops max_active_runs=100 ingress_per_minute=6000 "
        "management_per_minute=60",
        ".venv/bin/awooop project limits ops ingress_per_minute=none",
        "awooop project config <p> actions_url=https://…",
        "awooop project token <p> --role viewer",
        "awooop project create",
        "awooop dev up",
        "awooop config",
    ):
        session(command)
    session.assert_ran_all()


@pytest.mark.timeout(300)
def test_the_operations_approvals_and_workflows_docs_work_on_a_deployment(
    stack, settings, engine, tmp_path
):
    deployment = tmp_path / "deployment"
    deployment.mkdir()
    metrics = tmp_path / "metrics"  # the directory the stack's processes write to
    reader = user_env(
        TELEGRAM_BOT_TOKEN="123456:doc-bot-token",
        LINE_CHANNEL_ACCESS_TOKEN="doc-line-access-token",
        GITEA_TOKEN="doc-gitea-token",
        WEBHOOK_SECRET="doc-webhook-secret",
        LINE_CHANNEL_SECRET="doc-line-channel-secret",
    )
    exports = [
        c for c, step in STEPS.items() if c.startswith("export ") and step.session == "deployment"
    ]

    # The configuration operations.md shows is valid as written (its hosts do not exist here)
    literal = Shell(deployment, dict(reader), tmp_path)
    for command in exports:
        assert literal(documented()[command]).returncode == 0
    checked = literal("awooop config")
    assert checked.returncode == 0, checked.err

    # Configure (over the test's database and broker), migrate, start the processes
    session = Session("deployment", Shell(deployment, dict(reader), tmp_path))
    session.ctx.update(
        database_url=settings.database_url, broker_url=settings.broker_url, metrics=metrics
    )
    for command in exports:
        session(command)
    session("awooop migrate")
    session("awooop metrics reset")
    stack.env["AWOOOP_SECRET_KEY"] = session.shell.env["AWOOOP_SECRET_KEY"]
    stack.env["AWOOOP_PUBLIC_BASE_URL"] = session.shell.env["AWOOOP_PUBLIC_BASE_URL"]
    stack.worker()
    _, session.ctx["base"] = stack.web()

    # Set up a project
    session("awooop project create ops")
    session("awooop project retention ops 90")
    operator_token = session.ctx["ops"]["api_token"]
    session.shell.env["OPERATOR_TOKEN"] = operator_token  # what the reader copied
    for command in (
        "awooop project token ops --role viewer",
        "awooop project token ops --role admin",
        "awooop project routes ops alertmanager=alert-triage telegram=chatops line=chatops",
        "awooop project config ops actions_url=https://automation.example "
        "approvers=telegram:777000111 notify_telegram_chat=-1001234567890",
        "printenv TELEGRAM_BOT_TOKEN | awooop project outbound ops telegram",
        "awooop project limits ops max_active_runs=200 ingress_per_minute=6000 "
        "management_per_minute=60",
        "awooop project credentials ops",
        "awooop project revoke ops <credential id>",
        "awooop project token",
        "awooop project outbound",
        "awooop project outbound …",
    ):
        session(command)

    # Parked outbound messages (they park after failed sends; two are made here)
    from awooop.outbound.messages import Message
    from awooop.store import outbox
    from awooop.tasks import runs as run_tasks  # (needs the broker's settings)

    with engine.connect() as conn:
        parked = outbox.add(
            conn,
            "ops",
            None,
            [Message("webhook", "run_outcome", {"url": "http://x", "body": {}})] * 2,
        )
        conn.execute(
            text(
                "UPDATE awooop_outbox SET status = 'PARKED', attempts = 8"
                " WHERE message_id = ANY(:ids)"
            ),
            {"ids": parked},
        )
    session.ctx.update(parked=[str(m) for m in parked], parked_0=parked[0], parked_1=parked[1])
    session("awooop outbox list --status PARKED")
    session("awooop outbox retry <message id>")
    session("awooop outbox retry ID")

    # Steer a run stuck in compensation through the API (docs/operations.md "The API")
    fixed = tmp_path / "rollback-fixed"
    stuck = test_runs.admit(engine, "ops", "test-undo-needs-fix", {"fixed": str(fixed)})
    run_tasks.enqueue([stuck])
    wait_until(
        lambda: db.run(engine, stuck)["saga_status"] == "MANUAL_INTERVENTION",
        40,
        "the run to stop for a person",
    )
    fixed.touch()  # "rollback fixed by hand"
    session.shell.env["RUN"] = str(stuck)
    session.shell.env["VERSION"] = str(db.run(engine, stuck)["version"])
    for command in (
        """T="Authorization: Bearer $OPERATOR_TOKEN"; P=https://awooop.example.com/v1/"""
        """projects/ops""",
        'curl -s -H "$T" "$P/interventions"',
        'curl -s -H "$T" "$P/runs?status=WAITING_APPROVAL,PENDING&limit=20"',
        'curl -s -H "$T" "$P/runs/$RUN"',
        'curl -s -H "$T" "$P/runs/$RUN/events"',
        "OPERATION=$(python3 -c 'import uuid; print(uuid.uuid4())')",
        """curl -s -X POST -H "$T" -H 'Content-Type: application/json' -H "If-Match: """
        """\\"$VERSION\\"" -d "{\\"operation_id\\": \\"$OPERATION\\", \\"reason\\": """
        """\\"rollback fixed by hand\\"}" "$P/runs/$RUN/retry-compensation\"""",
    ):
        session(command)
    wait_until(
        lambda: db.run(engine, stuck)["saga_status"] == "COMPENSATED",
        40,
        "the retried compensation to finish",
    )

    # docs/approvals.md: configure, then decide an approval over the API
    for command in (
        "awooop project config ops approvers=telegram:777000111,line:U4af4980629...",
        "awooop project config ops notify_telegram_chat=-1001234567890 "
        "notify_url=https://hooks.example/awooop",
        "printenv LINE_CHANNEL_ACCESS_TOKEN | awooop project outbound ops line",
        "printenv GITEA_TOKEN | awooop project outbound ops gitea",
        "awooop project outbound ops webhook --generate",
    ):
        session(command)
    # docs/providers.md: the provider's own LINE secret, Gitea's address, Telegram's webhook
    # (set on a local stand-in for Telegram's API)
    from tests.support.fake_provider import FakeProvider

    session.ctx["telegram"] = telegram = FakeProvider()
    session.ctx["telegram_api"] = telegram.url
    session.shell.env["TELEGRAM_SECRET"] = session.ctx["ops"]["secrets"]["telegram"]
    for command in (
        "printenv LINE_CHANNEL_SECRET | awooop project inbound ops line",
        "awooop project config ops gitea_url=https://gitea.example.com",
        "awooop project routes ops gitea=",
        """curl -s "https://api.telegram.org/bot$TELEGRAM_BOT_TOKEN/setWebhook" -F """
        """"url=https://awooop.example.com/v1/projects/ops/webhooks/telegram" -F """
        """"secret_token=$TELEGRAM_SECRET" -F 'allowed_updates=["message", "callback_query"]'""",
    ):
        session(command)
    telegram.close()
    # docs/webhooks.md: the notify URL, then a rotation — a second secret, the old one revoked
    session("awooop project config ops notify_url=https://hooks.example/awooop")
    session("awooop project outbound ops webhook --generate")
    old_webhook_secret(session.shell("awooop project credentials ops"), session.ctx)
    session("awooop project revoke ops <old credential id>")
    waiting = test_runs.admit(engine, "ops", "test-approval")
    run_tasks.enqueue([waiting])
    wait_until(
        lambda: db.run(engine, waiting)["status"] == "WAITING_APPROVAL",
        40,
        "the run to wait for approval",
    )
    # The token only ever leaves in the prompt (to the chat or the webhook): give it one.
    approval_token = secrets.new_token()
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE awooop_approval SET token_hash = :hash WHERE run_id = :run_id"),
            {"hash": secrets.sha256_hex(approval_token), "run_id": waiting},
        )
    session.shell.env["APPROVAL_TOKEN"] = approval_token
    session.ctx["approval_run"] = str(waiting)
    session(
        """curl -X POST https://awooop.example/v1/projects/ops/approvals/$APPROVAL_TOKEN -H """
        """"Authorization: Bearer $OPERATOR_TOKEN" -H 'Content-Type: application/json' -d """
        """'{"decision": "approve", "actor": "alice", "comment": "change window open", """
        """"run_id": "a6610ada-184f-4133-a4cd-aba1256e5458", "step": "approve"}'"""
    )
    wait_until(lambda: db.run(engine, waiting)["status"] == "COMPLETED", 40, "approved run")

    # docs/workflows.md: a tool's result delivered over the API, then the routes it shows
    tool_run = test_runs.admit(engine, "ops", "test-tool")
    run_tasks.enqueue([tool_run])
    wait_until(lambda: db.run(engine, tool_run)["status"] == "WAITING_TOOL", 40, "the tool call")
    session.shell.env.update(RUN_ID=str(tool_run), TOKEN=operator_token)
    session(
        """curl -X POST http://127.0.0.1:8000/v1/projects/ops/runs/$RUN_ID/tool-results -H """
        """"Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d """
        """'{"event_id": "diag-42", "step": "diagnose", "status": "succeeded", "output": """
        """{"disk": "97%"}}'"""
    )
    wait_until(lambda: db.run(engine, tool_run)["status"] == "COMPLETED", 40, "the tool run")
    for command in (
        "awooop workflows",
        "awooop project routes ops alertmanager=alert-triage",
        "awooop project config ops actions_url=https://automation.example",
        "awooop project routes ops telegram=chatops line=chatops",
    ):
        session(command)

    # docs/operations.md "Rotating the secret key": a new key in front, every stored secret
    # re-encrypted with it, the old key dropped and nothing left that needs it
    for command in (
        'AWOOOP_SECRET_KEY="$(awooop dev key),$AWOOOP_SECRET_KEY"',
        "awooop secrets reencrypt",
        'AWOOOP_SECRET_KEY="${AWOOOP_SECRET_KEY%%,*}"',
        "awooop secrets check",
    ):
        session(command)
    session.assert_ran_all()


@pytest.mark.timeout(300)
@pytest.mark.timeout(300)
def test_the_workflow_tutorial_works_in_a_make_run_checkout(stack, settings, tmp_path):
    """docs/workflows.md: every Python block runs — the tutorial's files as the reader saves
    them, the others each in a fresh interpreter — and every command of the tutorial answers
    as the page says, against web, workers and beat that load the reader's module."""
    page = (ROOT / "docs" / "workflows.md").read_text()
    blocks = PYTHON_BLOCK.findall(page)
    files = {m.group(1): b for b in blocks if (m := FILE_BLOCK.match(b))}
    snippets = [b for b in blocks if not FILE_BLOCK.match(b)]
    assert set(files) == {"disk_cleanup.py", "test_disk_cleanup.py", "start_and_signal.py"}

    # Given a checkout as `make run` leaves it, with the pytest settings a checkout has
    checkout = tmp_path / "checkout"
    (checkout / ".awooop").mkdir(parents=True)
    (checkout / ".venv").symlink_to(ROOT / ".venv")
    (checkout / "pyproject.toml").symlink_to(ROOT / "pyproject.toml")
    devstack.write_env(
        checkout / ".awooop" / "env",
        {
            "AWOOOP_DATABASE_URL": settings.database_url,
            "AWOOOP_BROKER_URL": settings.broker_url,
            "AWOOOP_SECRET_KEY": settings.secret_key,
        },
    )
    session = Session("tutorial", Shell(checkout, user_env(), tmp_path))
    demo = session.shell(".venv/bin/awooop dev demo")  # as `make run` does
    assert demo.returncode == 0, demo.err

    # Every Python block that is not a file runs as written
    for snippet in snippets:
        done = subprocess.run(
            [str(BIN / "python"), "-c", snippet],
            cwd=checkout,
            env=user_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"{snippet}\n{done.stderr}"

    # 1-2. The reader saves the workflow and its test, and runs the test
    for name in ("disk_cleanup.py", "test_disk_cleanup.py"):
        (checkout / name).write_text(files[name])
    session(".venv/bin/pytest -q test_disk_cleanup.py")

    # 3. `make run` with the two variables exported: web, workers and beat load the module
    session("export PYTHONPATH=$PWD AWOOOP_WORKFLOW_MODULES=disk_cleanup")
    stack.env.update(
        PYTHONPATH=os.pathsep.join([str(checkout), str(ROOT)]),
        AWOOOP_WORKFLOW_MODULES="disk_cleanup",
        AWOOOP_SCHEDULE_INTERVAL_SECONDS="1",
    )
    stack.worker()
    stack.worker("maintenance", queues="maintenance")
    stack.beat()
    _, base = stack.web()
    session.ctx["base"] = base
    session.shell.env["AWOOOP_API_URL"] = base  # the web's address: a free port, not 8000

    # 4-5. Start it, find it waiting, signal it: it completes
    for command in (
        """export AWOOOP_API_TOKEN=$(python3 -c "import json; print(json.load(open('.awooop/"""
        """demo-project.json'))['api_token'])")""",
        ".venv/bin/awooop project workflows demo --allow disk-cleanup disk-report",
        """.venv/bin/awooop runs start demo disk-cleanup --input '{"host": "web-3"}' --key """
        """cleanup-web-3""",
        """RUN=$(.venv/bin/awooop runs start demo disk-cleanup --input '{"host": "web-3"}' """
        """--key cleanup-web-3 --json | python3 -c "import json, sys; print(json.load("""
        """sys.stdin)['run_id'])")""",
        ".venv/bin/awooop runs get demo $RUN",
        """curl -s -X POST http://127.0.0.1:8000/v1/projects/demo/runs/$RUN/signals/healthy """
        """-H "Authorization: Bearer $AWOOOP_API_TOKEN" -H 'Idempotency-Key: check-web-3' -H """
        """'Content-Type: application/json' -d '{"by": "alice"}'""",
    ):
        session(normal(command))
    wait_until(
        lambda: "COMPLETED" in session.shell(".venv/bin/awooop runs get demo $RUN").out,
        30,
        "the signalled run to complete",
    )
    finished = session.shell(".venv/bin/awooop runs get demo $RUN").out
    assert '{"reply": "cleaned web-3, confirmed by alice"}' in finished, finished

    # 6. The same from Python (the reader's web address for the docs' one)
    script = files["start_and_signal.py"]
    assert "http://127.0.0.1:8000" in script
    (checkout / "start_and_signal.py").write_text(script.replace("http://127.0.0.1:8000", base))
    session(".venv/bin/python start_and_signal.py")

    # 7. The schedule: beat starts disk-report in the project that allows it
    session(
        """curl -s "http://127.0.0.1:8000/v1/projects/demo/runs?channel=schedule" -H """
        """"Authorization: Bearer $AWOOOP_API_TOKEN\""""
    )
    session.assert_ran_all()


def test_the_per_host_metrics_commands_start_processes_that_serve_them(settings, tmp_path):
    # Given a host configured as the deployment docs say (over the test's database and
    # broker), with free ports and a scratch directory standing in for the documented ones
    from tests.support.processes import free_port

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = user_env(
        AWOOOP_DATABASE_URL=settings.database_url,
        AWOOOP_BROKER_URL=settings.broker_url,
        AWOOOP_SECRET_KEY=settings.secret_key,
    )
    session = Session("host", Shell(tmp_path, env, tmp_path))
    session.ctx.update(run_dir=run_dir, port_9101=free_port(), port_9102=free_port())
    session.ctx["port_9103"] = free_port()

    # When each documented command is run, Then each process serves its own metrics
    for command, step in STEPS.items():
        if step.session == "host":
            session(command)
    session.assert_ran_all()


def test_the_documented_promtool_checks_pass():
    debian_tools.executable("promtool", "prometheus")
    session = Session("deploy", Shell(ROOT, user_env(), ROOT / ".awooop"))
    for command, step in STEPS.items():
        if step.session == "deploy":
            session(command)
    session.assert_ran_all()


def test_commands_that_need_no_service(tmp_path):
    session = Session("local", Shell(ROOT, user_env(), tmp_path))
    for command, step in STEPS.items():
        if step.session == "local":
            session(command)
    session.assert_ran_all()


@pytest.mark.timeout(600)
def test_the_installation_section_works_as_written(settings, tmp_path):
    """README "Installing the package", typed literally (paths under /opt and /var/lib moved
    to scratch directories): a virtualenv, the package installed from the checkout and from
    a wheel, then the installed web, workers and beat start over the test's services."""
    from tests.support.processes import free_port

    env = user_env(
        AWOOOP_DATABASE_URL=settings.database_url,
        AWOOOP_BROKER_URL=settings.broker_url,
        AWOOOP_SECRET_KEY=settings.secret_key,
        AWOOOP_PORT=str(port := free_port()),
        AWOOOP_WORKFLOW_MODULES="",
    )
    # The installed commands, not the checkout's venv: PATH as a reader's plain shell has it.
    env["PATH"] = env["PATH"].replace(f"{BIN}{os.pathsep}", "")
    session = Session("install", Shell(ROOT, env, tmp_path))
    session.ctx.update(
        prefix=tmp_path / "opt-awooop", dist=tmp_path / "dist", state=tmp_path / "var-lib"
    )
    session.ctx["port"] = port
    for command in (
        "python3 -m venv /opt/awooop",
        "/opt/awooop/bin/pip install .",
        "python3 -m pip wheel --no-deps -w dist .",
        "/opt/awooop/bin/pip install dist/awooop-*-py3-none-any.whl",
    ):
        done = session(command)
        assert done.returncode == 0, done.err
    # The processes run away from the checkout, so they import the installed package.
    session.shell = Shell(tmp_path, session.shell.env, tmp_path)
    session("export PATH=/opt/awooop/bin:$PATH")
    for command, step in STEPS.items():
        if step.session == "install" and command not in session.ran:
            session(command)
    session.assert_ran_all()
