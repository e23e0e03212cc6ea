"""The ``awooop`` command: projects, migrations, configuration, the development stack; runs
over the HTTP API in :mod:`awooop.cli_runs`; key rotation in :mod:`awooop.cli_secrets`.

Every sub-command has ``--help``. Errors go to stderr on one line with exit status 2 (bad
usage, input or configuration) or 1 (the operation failed); nothing is written when the
input is invalid.

Settings come from ``AWOOOP_*`` environment variables; with none set, from the checkout's
``.awooop/env`` (:func:`awooop.config.discover`), which the command names on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from awooop import cli_approvals, cli_runs, cli_secrets, cli_workers, config, db, secrets
from awooop.config import STATE_DIR, ConfigError, Settings
from awooop.domain import limits as project_limits
from awooop.domain import retention as project_retention
from awooop.models.project import API_TOKEN_ROLES, CHANNEL_TYPES, PROJECT_ID_PATTERN
from awooop.outbound import signing
from awooop.workflows import registry

PROJECT_ID = re.compile(PROJECT_ID_PATTERN)
# The Alembic scripts: in an installed wheel the package awooop.migrations, in a checkout
# (where an editable install maps that package to it) the top-level migrations/ directory.
_PACKAGED_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
MIGRATIONS = (
    _PACKAGED_MIGRATIONS
    if _PACKAGED_MIGRATIONS.is_dir()
    else Path(__file__).resolve().parent.parent / "migrations"
)
DEMO_PROJECT = "demo"
# A token given on stdin (`project token --stdin`) is at least this long: a made one is 43.
MIN_GIVEN_TOKEN = 32
PROJECT_CONFIG_KEYS = (
    "actions_url",
    "approvers",
    "notify_url",
    "notify_telegram_chat",
    "notify_telegram_bot",
    "notify_line_to",
    "gitea_url",
)
_URL_KEYS = ("actions_url", "notify_url", "gitea_url")
# Provider credentials for outbound messages, by channel (stored encrypted).
OUTBOUND_CREDENTIALS = {
    "telegram": ("telegram:bot", "the bot token from @BotFather (123456:ABC...)"),
    "line": ("line:access", "the channel access token"),
    "gitea": ("gitea:token", "an API token of the bot user"),
    "webhook": (
        "webhook:signing",
        "the Standard Webhooks signing secret (whsec_<base64>; --generate makes one)",
    ),
}


class UsageError(Exception):
    """Invalid input on the command line; the message says what to change."""


def _environment() -> config.Environment:
    """The variables settings are read from; says on stderr when an env file supplies them."""
    environment = config.discover()
    if environment.env_file is not None:
        print(
            f"awooop: using {environment.env_file} (no database, broker or key in the environment)",
            file=sys.stderr,
        )
    return environment


def _settings(*required: str) -> Settings:
    environment = _environment()
    try:
        return Settings.from_env(environment.values, required or ("database_url", "secret_key"))
    except ConfigError as error:
        if " not set." not in str(error):
            raise
        raise ConfigError(f"{error}{_where_settings_were_looked_for(environment)}") from None


def _where_settings_were_looked_for(environment: config.Environment) -> str:
    if environment.env_file is not None:
        return f" (read {environment.env_file} and the environment)"
    explicit = config.deployment_settings(environment.values)
    if explicit:
        shown = ", ".join(explicit)
        return f" ({config.ENV_FILE} is not read while the environment sets {shown})"
    return f" (no {config.ENV_FILE} in {Path.cwd()} or its parents)"


def _engine(settings: Settings) -> Engine:
    return db.make_engine(settings.database_url, pool_size=1, settings=settings)


def _check_project_id(project_id: str) -> str:
    if not PROJECT_ID.fullmatch(project_id):
        raise UsageError(
            f"invalid project id {project_id!r}: use 1-64 lowercase letters, digits, '-' or '_',"
            " starting with a letter or digit"
        )
    return project_id


def default_routes() -> dict[str, str]:
    return {channel: f"demo-{channel}" for channel in CHANNEL_TYPES}


def create_project(settings: Settings, project_id: str, name: str | None = None) -> dict[str, Any]:
    """Create a project routed to the demo workflows; returns its fresh credentials."""
    from awooop.store import projects

    _check_project_id(project_id)
    box = secrets.SecretBox(settings.secret_keys)
    api_token = secrets.new_token()
    channel_secrets = {
        channel: secrets.new_token() for channel in CHANNEL_TYPES if channel != "api"
    }
    with db.transaction(_engine(settings)) as conn:
        try:
            projects.create_project(conn, project_id, name or project_id, default_routes())
        except projects.ProjectExists:
            raise UsageError(f"project {project_id!r} already exists") from None
        projects.add_api_token(conn, project_id, "operator", secrets.sha256_hex(api_token))
        for channel in ("telegram", "alertmanager"):  # echoed back verbatim: keep a hash
            projects.add_channel_secret(
                conn, project_id, channel, secret_hash=secrets.sha256_hex(channel_secrets[channel])
            )
        for channel in ("gitea", "line"):  # HMAC keys: must be recoverable, keep encrypted
            projects.add_channel_secret(
                conn, project_id, channel, secret_encrypted=box.encrypt(channel_secrets[channel])
            )
    return {"project_id": project_id, "api_token": api_token, "secrets": channel_secrets}


def _parse_routes(pairs: list[str]) -> dict[str, str]:
    routes = {}
    for pair in pairs:
        channel, sep, workflow = pair.partition("=")
        if not sep or not channel or not workflow:
            raise UsageError(f"route {pair!r} must look like <channel>=<workflow>")
        if channel not in CHANNEL_TYPES:
            raise UsageError(f"unknown channel {channel!r}; channels: {', '.join(CHANNEL_TYPES)}")
        if registry.latest(workflow) is None:
            known = ", ".join(sorted(_registered_names()))
            raise UsageError(f"unknown workflow {workflow!r}; registered: {known}")
        routes[channel] = workflow
    return routes


def cmd_project_create(args: argparse.Namespace) -> int:
    print(json.dumps(create_project(_settings(), args.project_id, args.name), indent=2))
    return 0


def cmd_project_routes(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    settings = _settings("database_url")
    registry.import_modules(settings.workflow_module_list)
    routes = _parse_routes(args.routes)
    with _engine(settings).connect() as conn:
        updated = projects.set_routes(conn, args.project_id, routes)
    if updated is None:
        raise UsageError(f"no project {args.project_id!r}")
    print(json.dumps({"project_id": args.project_id, "routes": updated}, indent=2))
    return 0


def _registered_names() -> set[str]:
    return {w.name for w in registry.all_workflows()}


def cmd_project_workflows(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    allow, disallow = args.allow or [], args.disallow or []
    both = sorted(set(allow) & set(disallow))
    if both:
        raise UsageError(f"both allowed and disallowed: {', '.join(both)}")
    settings = _settings("database_url")
    registry.import_modules(settings.workflow_module_list)
    unknown = sorted(set(allow) - _registered_names())
    if unknown:
        known = ", ".join(sorted(_registered_names()))
        raise UsageError(
            f"no registered workflow is called {', '.join(map(repr, unknown))}; registered: {known}"
        )
    with _engine(settings).connect() as conn:
        if allow or disallow:
            updated = projects.set_allowed_workflows(conn, args.project_id, allow, disallow)
        else:
            updated = projects.allowed_workflows(conn, args.project_id)
    if updated is None:
        raise UsageError(f"no project {args.project_id!r}")
    print(json.dumps({"project_id": args.project_id, "allowed_workflows": updated}, indent=2))
    return 0


def cmd_project_config(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    config = {}
    for pair in args.settings:
        key, sep, value = pair.partition("=")
        if not sep or key not in PROJECT_CONFIG_KEYS:
            raise UsageError(
                f"setting {pair!r} must look like <key>=<value>; keys: "
                f"{', '.join(PROJECT_CONFIG_KEYS)}"
            )
        if key in _URL_KEYS and not value.startswith(("http://", "https://")):
            raise UsageError(f"{key} must be an http:// or https:// URL")
        config[key] = _parse_approvers(value) if key == "approvers" else value
    settings = _settings("database_url")
    with _engine(settings).connect() as conn:
        updated = projects.set_config(conn, args.project_id, config)
    if updated is None:
        raise UsageError(f"no project {args.project_id!r}")
    print(json.dumps({"project_id": args.project_id, "config": updated}, indent=2))
    return 0


def _parse_approvers(value: str) -> dict[str, list[str]]:
    """``telegram:123,line:U4af...`` -> {"telegram": ["123"], "line": ["U4af..."]}."""
    approvers: dict[str, list[str]] = {"telegram": [], "line": []}
    for item in filter(None, (v.strip() for v in value.split(","))):
        channel, sep, user = item.partition(":")
        if not sep or channel not in approvers or not user:
            raise UsageError(
                f"approver {item!r} must look like telegram:<user id> or line:<user id>"
            )
        approvers[channel].append(user)
    return approvers


def cmd_project_outbound(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    credential_type, _ = OUTBOUND_CREDENTIALS[args.channel]
    if args.generate and args.channel != "webhook":
        raise UsageError("--generate makes webhook signing secrets only")
    secret = signing.new_secret() if args.generate else sys.stdin.readline().strip()
    if not secret:
        raise UsageError("give the credential on standard input (never as an argument)")
    if args.channel == "webhook":
        _check_webhook_secret(secret)
    settings = _settings("database_url", "secret_key")
    with db.transaction(_engine(settings)) as conn:
        if not projects.project_exists(conn, args.project_id):
            raise UsageError(f"no project {args.project_id!r}")
        projects.add_channel_secret(
            conn,
            args.project_id,
            credential_type,
            secret_encrypted=secrets.SecretBox(settings.secret_keys).encrypt(secret),
        )
    stored: dict[str, str] = {"project_id": args.project_id, "stored": credential_type}
    if args.generate:
        stored["secret"] = secret  # shown once: give it to the receiver
    print(json.dumps(stored))
    return 0


def _check_webhook_secret(secret: str) -> None:
    """New webhook secrets use the Standard Webhooks format, so receivers can hand them to
    the scheme's libraries as they are."""
    hint = "make one with `awooop project outbound <project> webhook --generate`"
    if not secret.startswith(signing.PREFIX):
        raise UsageError(f"a webhook signing secret looks like whsec_<base64>; {hint}")
    try:
        signing.key_of(secret)
    except signing.BadSecret as exc:
        raise UsageError(f"{exc}; {hint}") from None


def cmd_outbox_list(args: argparse.Namespace) -> int:
    from awooop.store import outbox

    with _engine(_settings("database_url")).connect() as conn:
        rows = outbox.list_messages(conn, args.status, args.run_id, args.limit)
    print(json.dumps(rows, indent=2, default=str))
    return 0


def cmd_outbox_retry(args: argparse.Namespace) -> int:
    from awooop.store import outbox

    with _engine(_settings("database_url")).connect() as conn:
        if not outbox.retry_parked(conn, args.message_id):
            raise UsageError(f"no parked message {args.message_id}")
    print(json.dumps({"message_id": str(args.message_id), "status": "PENDING"}))
    return 0


def cmd_project_limits(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    values: dict[str, int | None] = {}
    for pair in args.limits:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(
                f"limit {pair!r} must look like <key>=<number or none>; keys: "
                f"{', '.join(project_limits.LIMIT_KEYS)}"
            )
        try:
            values[key] = project_limits.parse_limit(key, value)
        except project_limits.InvalidLimit as exc:
            raise UsageError(str(exc)) from None
    settings = _settings("database_url")
    with _engine(settings).connect() as conn:
        updated = projects.set_limits(conn, args.project_id, values)
    if updated is None:
        raise UsageError(f"no project {args.project_id!r}")
    print(json.dumps({"project_id": args.project_id, "limits": updated}, indent=2))
    return 0


def cmd_project_retention(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    try:
        days = project_retention.parse_retention_days(args.days)
    except project_retention.InvalidRetention as exc:
        raise UsageError(str(exc)) from None
    settings = _settings("database_url")
    with _engine(settings).connect() as conn:
        if not projects.set_run_retention(conn, args.project_id, days):
            raise UsageError(f"no project {args.project_id!r}")
    effective = settings.run_retention_days if days is None else days
    floor = settings.dedupe_ttl_seconds / 86400
    print(
        json.dumps(
            {
                "project_id": args.project_id,
                "run_retention_days": days,
                "effective_days": max(effective, floor),
            },
            indent=2,
        )
    )
    return 0


def cmd_project_token(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    settings = _settings("database_url")
    if args.stdin:
        token = sys.stdin.readline().strip()
        if len(token) < MIN_GIVEN_TOKEN or not token.isascii() or not token.isprintable():
            raise UsageError(
                f"the token on stdin must be at least {MIN_GIVEN_TOKEN} printable ASCII "
                "characters (one that `awooop project token` printed)"
            )
    else:
        token = secrets.new_token()
    with db.transaction(_engine(settings)) as conn:
        if not projects.project_exists(conn, args.project_id):
            raise UsageError(f"no project {args.project_id!r}")
        projects.add_api_token(conn, args.project_id, args.role, secrets.sha256_hex(token))
    made = {} if args.stdin else {"api_token": token}  # never echo a token given on stdin
    print(json.dumps({"project_id": args.project_id, "role": args.role, **made}))
    return 0


def cmd_project_credentials(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    with _engine(_settings("database_url")).connect() as conn:
        if not projects.project_exists(conn, args.project_id):
            raise UsageError(f"no project {args.project_id!r}")
        rows = projects.list_credentials(conn, args.project_id)
    print(json.dumps(rows, indent=2, default=str))
    return 0


def cmd_project_revoke(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    with _engine(_settings("database_url")).connect() as conn:
        if not projects.revoke_credential(conn, args.project_id, args.credential_id):
            raise UsageError(
                f"project {args.project_id!r} has no active credential {args.credential_id}"
            )
    print(json.dumps({"credential_id": str(args.credential_id), "revoked": True}))
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from alembic import command
    from alembic.config import Config

    settings = _settings("database_url")
    # The migrations ship inside the package, so an installed wheel migrates without the
    # repository's alembic.ini (which points at the same directory).
    alembic_config = Config()
    alembic_config.set_main_option("script_location", str(MIGRATIONS))
    alembic_config.attributes["url"] = settings.database_url
    if args.revision.startswith("-") or args.direction == "down":
        command.downgrade(alembic_config, args.revision)
    else:
        command.upgrade(alembic_config, args.revision)
    return 0


def cmd_workflows(args: argparse.Namespace) -> int:
    # The deployment's own workflows too (AWOOOP_WORKFLOW_MODULES), as its processes load them.
    registry.import_modules(_settings().workflow_module_list)
    for wf in registry.all_workflows():
        steps = " -> ".join(s.name for s in wf.steps)
        schedule = f"  schedule={wf.schedule!r}" if wf.schedule else ""
        line = f"{wf.name} v{wf.version}  max_attempts={wf.max_attempts}  {steps}{schedule}"
        print(f"{line}  {wf.description}".rstrip())
    return 0


def cmd_metrics_reset(args: argparse.Namespace) -> int:
    directory = args.dir or _environment().values.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        raise UsageError("PROMETHEUS_MULTIPROC_DIR is not set; pass --dir or export it")
    from awooop import metrics

    removed = metrics.reset(directory)
    print(f"removed {removed} metric file(s) from {directory}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    environment = _environment()
    report = config.describe(environment)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        lines = [
            (f"{row['variable']}={_shown(row['value'])}", row["source"])
            for row in report["settings"]
        ]
        width = min(max(len(line) for line, _ in lines), 60)
        for line, source in lines:
            print(f"{line:<{width}}  # {source}")
    for note in report["notes"]:
        print(f"awooop: note: {note}", file=sys.stderr)
    if report["problems"]:
        problems = "; ".join(report["problems"])
        if " not set." in problems:
            problems += _where_settings_were_looked_for(environment)
        print(f"awooop: error: {problems}", file=sys.stderr)
        return 2
    return 0


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def cmd_dev_up(args: argparse.Namespace) -> int:
    from awooop import devstack

    try:
        values = devstack.up(args.state_dir)
    except devstack.NotInstalled as exc:
        raise UsageError(str(exc)) from None
    for key in ("AWOOOP_DATABASE_URL", "AWOOOP_BROKER_URL"):
        embedded = values.get(key.replace("AWOOOP_", "AWOOOP_EMBEDDED_")) == values[key]
        shown = config.mask_url(values[key])  # the full URL is in the env file only
        print(f"{key}={shown}  ({'embedded' if embedded else 'configured'})")
    print(f"environment written to {args.state_dir / 'env'} (passwords included)")
    return 0


def cmd_dev_run(args: argparse.Namespace) -> int:
    """Become honcho running the Procfile, recorded so that `awooop dev down` stops it."""
    from awooop import devstack

    honcho = shutil.which("honcho") or shutil.which("honcho", path=str(Path(sys.executable).parent))
    if honcho is None:
        raise UsageError("honcho is not installed (pip install -e '.[dev]', or make install)")
    if not Path(args.procfile).is_file():
        raise UsageError(f"no Procfile at {args.procfile}")
    devstack.record_runner(devstack.Paths(args.state_dir))
    sys.stdout.flush()
    os.execv(honcho, [honcho, "start", "-f", args.procfile])  # noqa: S606 - fixed argv


def cmd_dev_down(args: argparse.Namespace) -> int:
    from awooop import devstack

    stopped = devstack.down(args.state_dir)
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def cmd_dev_key(args: argparse.Namespace) -> int:
    print(secrets.new_encryption_key())
    return 0


def cmd_dev_demo(args: argparse.Namespace) -> int:
    """Create the demo project once; print its credentials and example requests."""
    from awooop.store import projects

    settings = _settings()
    saved = args.state_dir / "demo-project.json"
    with _engine(settings).connect() as conn:
        exists = projects.project_exists(conn, DEMO_PROJECT)
    if not exists:
        creds = create_project(settings, DEMO_PROJECT, "Demo project")
        saved.write_text(json.dumps(creds, indent=2))
        saved.chmod(0o600)
    elif saved.exists():
        creds = json.loads(saved.read_text())
    else:
        print(
            f"project {DEMO_PROJECT!r} exists but its credentials are not in {saved}; "
            "create another with `awooop project create <id>`."
        )
        return 0
    base = f"http://127.0.0.1:{settings.port}/v1/projects/{DEMO_PROJECT}"
    print(f"""
Demo project credentials (also in {saved}):
{json.dumps(creds, indent=2)}

Send a first event (API channel), then read the run it created:
  curl -s -X POST {base}/runs \\
       -H 'Authorization: Bearer {creds["api_token"]}' \\
       -H 'Idempotency-Key: first-event-1' -H 'Content-Type: application/json' \\
       -d '{{"summary": "disk almost full on db-1"}}'
  curl -s {base}/runs/<run_id> -H 'Authorization: Bearer {creds["api_token"]}'

Watch it: http://127.0.0.1:{settings.port}/metrics (Prometheus) and Flower on
http://127.0.0.1:5555 (user and password: FLOWER_BASIC_AUTH in {args.state_dir / "env"}).

A Telegram update:
  curl -s -X POST {base}/webhooks/telegram \\
       -H 'X-Telegram-Bot-Api-Secret-Token: {creds["secrets"]["telegram"]}' \\
       -H 'Content-Type: application/json' \\
       -d '{{"update_id": 1001, "message": {{"text": "/status", "from": {{"username": "ops"}}}}}}'

Browse the runs: http://127.0.0.1:{settings.port}/console/ (project {DEMO_PROJECT}, api_token)
""")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="awooop",
        description="AwoooP: operations events admitted exactly once and run as durable "
        "workflows. Settings come from AWOOOP_* environment variables; when none is set, "
        "from the checkout's .awooop/env (written by `awooop dev up` / `make run`, found in "
        "the current directory or a parent), and the command says so on stderr. "
        "`awooop config` shows what is in effect.",
        epilog="Exit status: 0 done; 1 the operation failed (e.g. the database is "
        "unreachable); 2 bad usage, input or configuration. Errors are one line on stderr.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    project = sub.add_parser("project", help="create projects and change their routes")
    project_sub = project.add_subparsers(dest="project_command", required=True, metavar="ACTION")
    create = project_sub.add_parser(
        "create",
        help="create a project routed to the demo workflows; prints its credentials",
        description="Creates the project with an operator API token and one secret per "
        "channel, and prints them as JSON. They are shown once: only hashes and "
        "encrypted values are stored.",
    )
    create.add_argument("project_id", help="1-64 characters: a-z, 0-9, '-', '_'")
    create.add_argument("--name", help="display name (default: the project id)")
    create.set_defaults(func=cmd_project_create)
    routes = project_sub.add_parser(
        "routes",
        help="route channels to workflows",
        description="Sets which workflow each channel's events start, e.g. "
        "`awooop project routes demo telegram=demo-telegram api=noop-3`.",
    )
    routes.add_argument("project_id")
    routes.add_argument("routes", nargs="+", metavar="CHANNEL=WORKFLOW")
    routes.set_defaults(func=cmd_project_routes)
    allowed = project_sub.add_parser(
        "workflows",
        help="the workflows clients may start by name; prints the list",
        description="Clients start a workflow by name (POST /v1/projects/<p>/runs with "
        '{"workflow": ...}, `awooop runs start`) when it is routed for one of the project\'s '
        "channels or on this list, e.g. `awooop project workflows ops --allow alert-triage`. "
        "Without --allow or --disallow, prints the list. --allow refuses names no registered "
        "workflow has; --disallow takes any name off. Changes reach web processes within "
        "AWOOOP_AUTH_CACHE_SECONDS.",
    )
    allowed.add_argument("project_id")
    allowed.add_argument(
        "--allow", action="extend", nargs="+", metavar="NAME", help="allow these workflows"
    )
    allowed.add_argument(
        "--disallow", action="extend", nargs="+", metavar="NAME", help="take these off the list"
    )
    allowed.set_defaults(func=cmd_project_workflows)
    config = project_sub.add_parser(
        "config",
        help="set what workflows need, e.g. actions_url",
        description="Sets project settings the workflows read, e.g. `awooop project config ops "
        "actions_url=https://automation.example` (the endpoint alert-triage and "
        "chatops call). Changes reach web processes within "
        "AWOOOP_AUTH_CACHE_SECONDS.",
    )
    config.add_argument("project_id")
    config.add_argument("settings", nargs="+", metavar="KEY=VALUE")
    config.set_defaults(func=cmd_project_config)
    outbound = project_sub.add_parser(
        "outbound",
        help="store a provider credential for outbound messages (read from stdin)",
        description="Stores, encrypted, the credential AwoooP uses to send to a channel: "
        + "; ".join(f"{c}: {what}" for c, (_, what) in OUTBOUND_CREDENTIALS.items())
        + ". Read from standard input so it never shows in the process list, e.g. "
        "`printenv BOT_TOKEN | awooop project outbound ops telegram`.",
    )
    outbound.add_argument("project_id")
    outbound.add_argument("channel", choices=sorted(OUTBOUND_CREDENTIALS))
    outbound.add_argument(
        "--generate",
        action="store_true",
        help="webhook only: make a new whsec_ signing secret instead of reading one, store "
        "it and print it once (for the receiver)",
    )
    outbound.set_defaults(func=cmd_project_outbound)
    credentials = project_sub.add_parser(
        "credentials",
        help="list the project's tokens and secrets (ids, kinds, roles; never the secrets)",
        description="The credential ids name callers in the audit trail (api-token:<id>).",
    )
    credentials.add_argument("project_id")
    credentials.set_defaults(func=cmd_project_credentials)
    revoke = project_sub.add_parser(
        "revoke",
        help="revoke a token or secret by id (rotation: add the new one first)",
        description="Revokes one credential; web processes stop accepting it within "
        "AWOOOP_AUTH_CACHE_SECONDS.",
    )
    revoke.add_argument("project_id")
    revoke.add_argument("credential_id", type=uuid.UUID)
    revoke.set_defaults(func=cmd_project_revoke)

    limits = project_sub.add_parser(
        "limits",
        help="set quotas and rate limits",
        description="Sets the project's limits, e.g. `awooop project limits ops "
        "max_active_runs=100 ingress_per_minute=6000 management_per_minute=60`; "
        "`<key>=none` removes one. max_active_runs: runs not yet finished (admission over "
        "it gets 429 E-QUOTA-001); *_per_minute: requests per one-minute window (429 "
        "E-RATE-001). Changes reach web processes within AWOOOP_AUTH_CACHE_SECONDS.",
    )
    limits.add_argument("project_id")
    limits.add_argument("limits", nargs="+", metavar="KEY=VALUE")
    limits.set_defaults(func=cmd_project_limits)
    retention = project_sub.add_parser(
        "retention",
        help="how many days the project's finished runs are kept",
        description="Sets how long the project's finished runs (COMPLETED, FAILED, "
        "CANCELLED) are kept before the retention sweep deletes them with their events, "
        "timers, approvals, inbox and dedupe rows, e.g. `awooop project retention ops 90`; "
        "`default` goes back to AWOOOP_RUN_RETENTION_DAYS. A run is never deleted before its "
        "dedupe row expires (AWOOOP_DEDUPE_TTL_SECONDS): the answer's effective_days says "
        "which applies.",
    )
    retention.add_argument("project_id")
    retention.add_argument(
        "days", help=f"whole days, 1-{project_retention.MAX_RETENTION_DAYS}, or 'default'"
    )
    retention.set_defaults(func=cmd_project_retention)
    token = project_sub.add_parser(
        "token",
        help="create an API token with a role; prints it once",
        description="Roles: viewer (reads runs), operator (reads, admits events, steers "
        "runs), admin (operator + manual close), ingest (admits events only).",
    )
    token.add_argument("project_id")
    token.add_argument("--role", choices=API_TOKEN_ROLES, required=True)
    token.add_argument(
        "--stdin",
        action="store_true",
        help="register the token read from stdin (one you already hold, e.g. to let one "
        "admin token see several projects in the ops console) instead of making a new one",
    )
    token.set_defaults(func=cmd_project_token)

    cli_runs.add_parser(sub)
    cli_secrets.add_parser(sub)
    cli_approvals.add_parser(sub)
    cli_workers.add_parser(sub)

    outbox_parser = sub.add_parser("outbox", help="outbound messages: list, retry parked ones")
    outbox_sub = outbox_parser.add_subparsers(
        dest="outbox_command", required=True, metavar="ACTION"
    )
    listing = outbox_sub.add_parser(
        "list", help="recent messages, newest first (PARKED ones never send by themselves)"
    )
    listing.add_argument("--status", choices=["PENDING", "SENT", "PARKED"])
    listing.add_argument("--run-id", type=uuid.UUID, help="only this run's messages")
    listing.add_argument("--limit", type=int, default=100)
    listing.set_defaults(func=cmd_outbox_list)
    retry = outbox_sub.add_parser(
        "retry", help="send a PARKED message again (after fixing its credential or target)"
    )
    retry.add_argument("message_id", type=uuid.UUID)
    retry.set_defaults(func=cmd_outbox_retry)

    config_cmd = sub.add_parser(
        "config",
        help="print the effective configuration (secrets masked) and check it",
        description="Prints every setting as VARIABLE=value with where the value comes "
        "from: the environment, the env file (.awooop/env, read only when no AWOOOP_* "
        "setting is set) or the default. Passwords in URLs, the secret key and Flower's "
        "password are masked. Exits 2, with every problem on one line on stderr, when a "
        "process (web, worker, beat) would refuse to start with this configuration.",
    )
    config_cmd.add_argument(
        "--json",
        action="store_true",
        help='print {"env_file", "settings": [{"variable", "value", "source"}], '
        '"problems", "notes"} instead',
    )
    config_cmd.set_defaults(func=cmd_config)

    migrate = sub.add_parser("migrate", help="apply database migrations (alembic)")
    migrate.add_argument(
        "revision", nargs="?", default="head", help="target revision (default: head)"
    )
    migrate.add_argument(
        "--down",
        dest="direction",
        action="store_const",
        const="down",
        default="up",
        help="downgrade to REVISION (e.g. base)",
    )
    migrate.set_defaults(func=cmd_migrate)

    metrics_cmd = sub.add_parser("metrics", help="the Prometheus multiprocess directory")
    metrics_sub = metrics_cmd.add_subparsers(
        dest="metrics_command", required=True, metavar="ACTION"
    )
    reset = metrics_sub.add_parser(
        "reset",
        help="empty PROMETHEUS_MULTIPROC_DIR before starting the processes",
        description="Deletes the metric files (*.db) every web and worker process writes to "
        "PROMETHEUS_MULTIPROC_DIR. Run it before the processes start (make run does), never "
        "while they run: their counters then start again from zero.",
    )
    reset.add_argument("--dir", help="the directory (default: $PROMETHEUS_MULTIPROC_DIR)")
    reset.set_defaults(func=cmd_metrics_reset)

    workflows = sub.add_parser("workflows", help="list the registered workflows")
    workflows.set_defaults(func=cmd_workflows)

    dev = sub.add_parser("dev", help="the embedded development services")
    dev.add_argument(
        "--state-dir",
        type=Path,
        default=STATE_DIR,
        help=f"where data, pid files and the env file live (default: {STATE_DIR})",
    )
    dev_sub = dev.add_subparsers(dest="dev_command", required=True, metavar="ACTION")
    dev_sub.add_parser(
        "up", help="start embedded PostgreSQL/Redis unless AWOOOP_*_URL is set; write env file"
    ).set_defaults(func=cmd_dev_up)
    run = dev_sub.add_parser(
        "run",
        help="run the Procfile's processes under honcho (make run); dev down stops them",
        description="Records this process (pid and start time) in honcho.pid in the state "
        "directory, then becomes `honcho start -f PROCFILE`. `awooop dev down` stops exactly "
        "that honcho (which stops its processes), whatever else runs on the machine.",
    )
    run.add_argument("procfile", nargs="?", default="Procfile")
    run.set_defaults(func=cmd_dev_run)
    dev_sub.add_parser(
        "down",
        help="stop what `dev run` and `dev up` started here: the processes, PostgreSQL, Redis",
    ).set_defaults(func=cmd_dev_down)
    dev_sub.add_parser(
        "key", help="print a new AWOOOP_SECRET_KEY (a Fernet key) for a deployment"
    ).set_defaults(func=cmd_dev_key)
    dev_sub.add_parser(
        "demo", help="create the demo project (once) and print how to send a first event"
    ).set_defaults(func=cmd_dev_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe fails here, inside the try
        return code
    except (UsageError, ConfigError) as error:
        print(f"awooop: error: {error}", file=sys.stderr)
        return 2
    except sa_exc.DBAPIError as error:
        print(f"awooop: error: {_database_error(error)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `awooop config | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _database_error(error: sa_exc.DBAPIError) -> str:
    """One line for a database error: the server's message (it names no password)."""
    if getattr(error.orig, "pgcode", None) == "42P01":  # undefined_table
        return "the database has no AwoooP tables: run `awooop migrate` first"
    message = " ".join(str(error.orig).split())
    if isinstance(error, sa_exc.OperationalError):
        return f"cannot use the database (AWOOOP_DATABASE_URL): {message}"
    return f"the database refused the operation: {message}"


if __name__ == "__main__":
    sys.exit(main())
