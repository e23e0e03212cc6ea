"""``awooop project``: create projects and change what they hold, in the database directly:
routes, the workflows clients may start, settings, provider credentials, limits, retention,
API tokens and the credentials' list and revocation.

Errors are one line on stderr with exit status 2 (bad usage or input) or 1 (the operation
failed); nothing is written when the input is invalid.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from awooop import db, secrets
from awooop.cli import _db
from awooop.cli._db import UsageError
from awooop.config import Settings
from awooop.domain import limits as project_limits
from awooop.domain import retention as project_retention
from awooop.models.project import API_TOKEN_ROLES, CHANNEL_TYPES, PROJECT_ID_PATTERN
from awooop.outbound import signing
from awooop.workflows import registry

if TYPE_CHECKING:
    from sqlalchemy import Connection

PROJECT_ID = re.compile(PROJECT_ID_PATTERN)
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

# Inbound channel secrets (what a provider's requests are checked with), by channel, and how
# each is kept: a secret the provider echoes back verbatim only as a hash, an HMAC key
# encrypted (it must be recovered to verify a signature).
INBOUND_SECRETS = {
    "alertmanager": ("hash", "the credential Alertmanager sends (http_config authorization)"),
    "telegram": ("hash", "the secret_token given to setWebhook"),
    "gitea": ("encrypted", "the webhook's secret"),
    "line": ("encrypted", "the channel secret LINE's console shows"),
}
MIN_INBOUND_SECRET = 16
# What Telegram accepts as a secret_token.
TELEGRAM_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
# A Telegram chat as the Bot API's chat_id takes it: the chat's integer id (negative for
# groups and channels) or a public channel's @username (5-32 letters, digits, '_').
TELEGRAM_CHAT = re.compile(r"-?[0-9]{1,20}|@[A-Za-z][A-Za-z0-9_]{4,31}")
# A bot's id: the number before the ':' of its token.
TELEGRAM_BOT_ID = re.compile(r"[0-9]{1,20}")


def _stdin_line(what: str) -> str:
    """The first line of standard input, stripped, read strictly as UTF-8 (``what`` names it
    in the refusal of other bytes)."""
    buffer = getattr(sys.stdin, "buffer", None)
    try:
        if buffer is not None:
            return str(buffer.readline().decode("utf-8")).strip()
        line = sys.stdin.readline()
        line.encode("utf-8")  # a str from a surrogateescape reader may hide raw bytes
        return line.strip()
    except (UnicodeDecodeError, UnicodeEncodeError):
        raise UsageError(f"{what} on standard input is not UTF-8 text") from None


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
    try:
        projects.check_name(project_id if name is None else name)
    except projects.InvalidName as exc:
        raise UsageError(str(exc)) from None
    box = secrets.SecretBox(settings.secret_keys)
    api_token = secrets.new_token()
    channel_secrets = {
        channel: secrets.new_token() for channel in CHANNEL_TYPES if channel != "api"
    }
    with db.transaction(_db.engine(settings)) as conn:
        try:
            projects.create_project(conn, project_id, name or project_id, default_routes())
        except projects.ProjectExists:
            raise UsageError(f"project {project_id!r} already exists") from None
        projects.add_api_token(conn, project_id, "operator", secrets.sha256_hex(api_token))
        for channel, (kept, _) in INBOUND_SECRETS.items():
            _add_secret(conn, box, project_id, channel, channel_secrets[channel], kept)
    return {"project_id": project_id, "api_token": api_token, "secrets": channel_secrets}


def _parse_routes(pairs: list[str]) -> dict[str, str | None]:
    """``CHANNEL=WORKFLOW`` pairs; ``CHANNEL=`` (no workflow) is None, the route taken off."""
    routes: dict[str, str | None] = {}
    for pair in pairs:
        channel, sep, workflow = pair.partition("=")
        if not sep or not channel:
            raise UsageError(
                f"route {pair!r} must look like <channel>=<workflow> (or <channel>= to unroute)"
            )
        if channel not in CHANNEL_TYPES:
            raise UsageError(f"unknown channel {channel!r}; channels: {', '.join(CHANNEL_TYPES)}")
        if channel in routes:
            raise UsageError(f"channel {channel!r} is given more than once")
        if not workflow:
            routes[channel] = None
            continue
        if registry.latest(workflow) is None:
            known = ", ".join(sorted(_registered_names()))
            raise UsageError(f"unknown workflow {workflow!r}; registered: {known}")
        routes[channel] = workflow
    return routes


def cmd_project_create(args: argparse.Namespace) -> int:
    print(json.dumps(create_project(_db.settings(), args.project_id, args.name), indent=2))
    return 0


def cmd_project_routes(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    settings = _db.settings("database_url")
    registry.import_modules(settings.workflow_module_list)
    routes = _parse_routes(args.routes)
    with _db.engine(settings).connect() as conn:
        try:
            updated = projects.set_routes(conn, args.project_id, routes)
        except projects.EngineOnlyWorkflow as exc:
            raise UsageError(str(exc)) from None
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
    settings = _db.settings("database_url")
    registry.import_modules(settings.workflow_module_list)
    unknown = sorted(set(allow) - _registered_names())
    if unknown:
        known = ", ".join(sorted(_registered_names()))
        modules = settings.workflow_modules or "not set here"
        raise UsageError(
            f"no registered workflow is called {', '.join(map(repr, unknown))}; registered: "
            f"{known}; a workflow of your own is registered when its module is named in "
            f"AWOOOP_WORKFLOW_MODULES ({modules}) and importable (PYTHONPATH)"
        )
    with _db.engine(settings).connect() as conn:
        if allow or disallow:
            try:
                updated = projects.set_allowed_workflows(conn, args.project_id, allow, disallow)
            except projects.EngineOnlyWorkflow as exc:
                raise UsageError(str(exc)) from None
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
        if not sep:
            raise UsageError(
                f"setting {pair!r} must look like <key>=<value>; keys: "
                f"{', '.join(PROJECT_CONFIG_KEYS)}"
            )
        if key not in PROJECT_CONFIG_KEYS:
            raise UsageError(f"unknown setting {key!r}; known: {', '.join(PROJECT_CONFIG_KEYS)}")
        _check_setting(key, value)
        config[key] = _parse_approvers(value) if key == "approvers" else value
    settings = _db.settings("database_url")
    with _db.engine(settings).connect() as conn:
        updated = projects.set_config(conn, args.project_id, config)
    if updated is None:
        raise UsageError(f"no project {args.project_id!r}")
    print(json.dumps({"project_id": args.project_id, "config": updated}, indent=2))
    return 0


def _check_setting(key: str, value: str) -> None:
    """Refuse a value ``key`` cannot use: control characters in any, a URL that is not a
    whole http(s) URL, a Telegram chat or bot that Telegram would not take."""
    if not value.isprintable():
        raise UsageError(f"{key} may not hold control characters or bytes that are not UTF-8")
    if key in _URL_KEYS and not _is_http_url(value):
        raise UsageError(
            f"{key} must be a valid http:// or https:// URL with a host, e.g. "
            "https://automation.example"
        )
    if key == "notify_telegram_chat" and not TELEGRAM_CHAT.fullmatch(value):
        raise UsageError(
            "notify_telegram_chat is a Telegram chat id (an integer, negative for groups and "
            "channels, e.g. -1001234567890) or a public channel's @username"
        )
    if key == "notify_telegram_bot" and not TELEGRAM_BOT_ID.fullmatch(value):
        raise UsageError(
            "notify_telegram_bot is the bot's numeric id (the part of its token before ':')"
        )


def _is_http_url(value: str) -> bool:
    if not value.isascii() or any(c.isspace() for c in value):
        return False
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


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


def _add_secret(
    conn: Connection,
    box: secrets.SecretBox,
    project_id: str,
    channel_type: str,
    secret: str,
    kept: str,
) -> None:
    """Store a channel's credential as ``kept`` says: "hash" (a secret the provider sends
    back verbatim, checked by its hash) or "encrypted" (a key that must be recovered)."""
    from awooop.store import projects

    if kept == "hash":
        projects.add_channel_secret(
            conn, project_id, channel_type, secret_hash=secrets.sha256_hex(secret)
        )
    else:
        projects.add_channel_secret(
            conn, project_id, channel_type, secret_encrypted=box.encrypt(secret)
        )


def _store_secret(project_id: str, channel_type: str, secret: str, kept: str) -> None:
    """Add a credential to an existing project (:func:`_add_secret`), or refuse."""
    from awooop.store import projects

    settings = _db.settings("database_url", "secret_key")
    with db.transaction(_db.engine(settings)) as conn:
        if not projects.project_exists(conn, project_id):
            raise UsageError(f"no project {project_id!r}")
        _add_secret(
            conn, secrets.SecretBox(settings.secret_keys), project_id, channel_type, secret, kept
        )


def cmd_project_outbound(args: argparse.Namespace) -> int:
    _check_project_id(args.project_id)
    credential_type, _ = OUTBOUND_CREDENTIALS[args.channel]
    if args.generate and args.channel != "webhook":
        raise UsageError("--generate makes webhook signing secrets only")
    secret = signing.new_secret() if args.generate else _stdin_line("the credential")
    if not secret:
        raise UsageError("give the credential on standard input (never as an argument)")
    if args.channel == "webhook":
        _check_webhook_secret(secret)
    _store_secret(args.project_id, credential_type, secret, "encrypted")
    stored: dict[str, str] = {"project_id": args.project_id, "stored": credential_type}
    if args.generate:
        stored["secret"] = secret  # shown once: give it to the receiver
    print(json.dumps(stored))
    return 0


def cmd_project_inbound(args: argparse.Namespace) -> int:
    _check_project_id(args.project_id)
    secret = _stdin_line("the secret")
    if not secret:
        raise UsageError("give the secret on standard input (never as an argument)")
    if len(secret) < MIN_INBOUND_SECRET:
        raise UsageError(f"the secret must be at least {MIN_INBOUND_SECRET} characters")
    if args.channel == "telegram" and not TELEGRAM_SECRET_TOKEN.fullmatch(secret):
        raise UsageError(
            "a Telegram secret_token is at most 256 characters of A-Z, a-z, 0-9, _ and -"
        )
    kept, _ = INBOUND_SECRETS[args.channel]
    _store_secret(args.project_id, args.channel, secret, kept)
    print(json.dumps({"project_id": args.project_id, "stored": args.channel}))
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
    settings = _db.settings("database_url")
    with _db.engine(settings).connect() as conn:
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
    settings = _db.settings("database_url")
    with _db.engine(settings).connect() as conn:
        if not projects.set_run_retention(conn, args.project_id, days):
            raise UsageError(f"no project {args.project_id!r}")
    effective = max(
        settings.run_retention_days if days is None else days, settings.dedupe_ttl_seconds / 86400
    )
    print(
        json.dumps(
            {
                "project_id": args.project_id,
                "run_retention_days": days,
                # whole days as a whole number (the settings are floats: 7, not 7.0)
                "effective_days": int(effective) if effective == int(effective) else effective,
            },
            indent=2,
        )
    )
    return 0


def cmd_project_token(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    settings = _db.settings("database_url")
    if args.stdin:
        token = _stdin_line("the token")
        if len(token) < MIN_GIVEN_TOKEN or not token.isascii() or not token.isprintable():
            raise UsageError(
                f"the token on stdin must be at least {MIN_GIVEN_TOKEN} printable ASCII "
                "characters (one that `awooop project token` printed)"
            )
    else:
        token = secrets.new_token()
    with db.transaction(_db.engine(settings)) as conn:
        if not projects.project_exists(conn, args.project_id):
            raise UsageError(f"no project {args.project_id!r}")
        try:
            projects.add_api_token(conn, args.project_id, args.role, secrets.sha256_hex(token))
        except projects.TokenRegistered as exc:
            raise UsageError(
                f"{exc}; a token has one role in a project: to change it, revoke it first "
                f"(`awooop project revoke {args.project_id} {exc.credential_id}`) and "
                "register it again"
            ) from None
    made = {} if args.stdin else {"api_token": token}  # never echo a token given on stdin
    print(json.dumps({"project_id": args.project_id, "role": args.role, **made}))
    return 0


def cmd_project_credentials(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    with _db.engine(_db.settings("database_url")).connect() as conn:
        if not projects.project_exists(conn, args.project_id):
            raise UsageError(f"no project {args.project_id!r}")
        rows = projects.list_credentials(conn, args.project_id)
    print(json.dumps(rows, indent=2, default=str))
    return 0


def cmd_project_revoke(args: argparse.Namespace) -> int:
    from awooop.store import projects

    _check_project_id(args.project_id)
    with _db.engine(_db.settings("database_url")).connect() as conn:
        if not projects.revoke_credential(conn, args.project_id, args.credential_id):
            raise UsageError(
                f"project {args.project_id!r} has no active credential {args.credential_id}"
            )
    print(json.dumps({"credential_id": str(args.credential_id), "revoked": True}))
    return 0


def add_parser(sub: Any) -> None:
    """The ``project`` command and its actions, under the ``awooop`` parser's sub-commands."""
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
        "`awooop project routes demo telegram=demo-telegram api=noop-3`; the channels not "
        "named keep their routes. `CHANNEL=` with no workflow takes the channel's route off: "
        'its events are then answered 200 {"status": "ignored"} and start nothing. Changes '
        "reach web processes within AWOOOP_AUTH_CACHE_SECONDS.",
    )
    routes.add_argument("project_id")
    routes.add_argument(
        "routes", nargs="+", metavar="CHANNEL=WORKFLOW", help="CHANNEL= (empty) unroutes"
    )
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
    inbound = project_sub.add_parser(
        "inbound",
        help="store a secret a provider's requests are checked with (read from stdin)",
        description="Adds a secret for a channel's incoming requests, beside the one "
        "`awooop project create` made (both verify until one is revoked with `awooop project "
        "revoke`): "
        + "; ".join(f"{c}: {what}" for c, (_, what) in INBOUND_SECRETS.items())
        + f". At least {MIN_INBOUND_SECRET} characters, read from standard input, e.g. "
        "`printenv LINE_CHANNEL_SECRET | awooop project inbound ops line`. Changes reach web "
        "processes within AWOOOP_AUTH_CACHE_SECONDS.",
    )
    inbound.add_argument("project_id")
    inbound.add_argument("channel", choices=sorted(INBOUND_SECRETS))
    inbound.set_defaults(func=cmd_project_inbound)
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
        description="Roles: viewer (reads runs, workflows and workers), operator (reads, "
        "admits events, sends signals, delivers tool results, steers runs and reruns one "
        "finished run), admin (operator + manual close and rerunning many runs at once, and "
        "the ops console's project list), ingest (admits events, sends signals and delivers "
        "tool results; reads nothing). A token has one role in a project: registering one "
        "the project already has (--stdin) is refused; revoke it first to change its role.",
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
