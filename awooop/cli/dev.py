"""The commands that run and check a deployment's processes: ``awooop config`` (the
effective configuration), ``migrate``, ``metrics reset``, ``workflows`` (the built-in ones and
the deployment's) and ``dev`` (the embedded development services, the Procfile's processes,
the demo project).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from awooop import bootstrap, config, failover, secrets
from awooop.cli import _db
from awooop.cli._db import UsageError
from awooop.cli.projects import create_project
from awooop.config import STATE_DIR
from awooop.workflows import registry

DEMO_PROJECT = "demo"


def cmd_migrate(args: argparse.Namespace) -> int:
    from awooop import migrate

    revision = args.revision or "head"
    down = revision.startswith("-") or args.direction == "down"
    if args.direction == "down" and args.revision in (None, "head"):
        raise UsageError(
            "--down needs the revision to go back to, e.g. `awooop migrate --down 0013` "
            "(or `base`: every AwoooP table dropped)"
        )
    settings = _db.settings("database_url")
    try:
        migrate.run(settings, revision, down=down)
    except migrate.RevisionError as error:  # the user's input: exit status 2
        raise UsageError(str(error)) from error
    except migrate.MigrateError as error:
        print(f"awooop: error: {error}", file=sys.stderr)
        return 1
    if settings.database_failover_check != failover.OFF:
        # Said on stderr when the database could lose commits on failover; never refused here.
        failover.check(settings, "migrate")
    return 0


def cmd_workflows(args: argparse.Namespace) -> int:
    # The deployment's own workflows too (AWOOOP_WORKFLOW_MODULES), as its processes load them.
    registry.import_modules(_db.settings().workflow_module_list)
    for wf in registry.all_workflows():
        steps = " -> ".join(s.name for s in wf.steps)
        schedule = f"  schedule={wf.schedule!r}" if wf.schedule else ""
        line = f"{wf.name} v{wf.version}  max_attempts={wf.max_attempts}  {steps}{schedule}"
        if registry.engine_only(wf.name):  # not for routes or clients
            line += "  (started by the engine only)"
        print(f"{line}  {wf.description}".rstrip())
    return 0


def cmd_metrics_reset(args: argparse.Namespace) -> int:
    directory = args.dir or _db.read_environment().values.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        raise UsageError("PROMETHEUS_MULTIPROC_DIR is not set; pass --dir or export it")
    # awooop.metric_files, not awooop.metrics: importing the metrics would write this
    # command's own metric files into the directory, which it would then count as removed.
    from awooop import metric_files

    removed = metric_files.reset(directory)
    print(f"removed {removed} metric file(s) from {directory}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    if args.markdown:
        from awooop import config_doc

        print(config_doc.render(), end="")
        return 0
    environment = _db.read_environment()
    report = bootstrap.describe(environment)
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
            problems += _db.where_settings_were_looked_for(environment)
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
    except devstack.StartFailed as exc:
        print(f"awooop: error: {exc}", file=sys.stderr)
        return 1
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

    settings = _db.settings()
    saved = args.state_dir / "demo-project.json"
    with _db.engine(settings).connect() as conn:
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


def add_parser(sub: Any) -> None:
    """``config``, ``migrate``, ``metrics``, ``workflows`` and ``dev``, under the ``awooop``
    parser's sub-commands."""
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
    config_cmd.add_argument(
        "--markdown",
        action="store_true",
        help="print the reference of every setting instead (docs/configuration.md: what "
        "each does, its default and its checks); reads no configuration",
    )
    config_cmd.set_defaults(func=cmd_config)

    migrate = sub.add_parser(
        "migrate",
        help="apply database migrations (alembic)",
        description="Upgrades the database to this release's newest migration (or to "
        "REVISION). Safe to run on every deploy, while the previous release serves: one "
        "migrate at a time (an advisory lock; a second one waits), a lock timeout on each "
        "migration. With --down, goes back to REVISION: run it only with no process of the "
        "newer release serving. docs/upgrading.md says more.",
    )
    migrate.add_argument(
        "revision", nargs="?", default=None, help="target revision (default: head)"
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

    workflows = sub.add_parser(
        "workflows",
        help="list the workflows the processes have: the built-in ones and those of the "
        "modules in AWOOOP_WORKFLOW_MODULES",
    )
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
