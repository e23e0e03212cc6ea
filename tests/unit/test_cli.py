"""The awooop command's input checks (no database needed: they fail before connecting)."""

from __future__ import annotations

import os
import subprocess

import pytest

from awooop import cli, config
from tests.support.processes import BIN


def run(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def test_invalid_project_id_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    code, err = run(capsys, "project", "create", "Bad Id!")
    assert code == 2
    assert "invalid project id 'Bad Id!'" in err


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ("telegram", "must look like <channel>=<workflow>"),
        ("=noop-3", "must look like <channel>=<workflow>"),
        ("fax=demo-api", "unknown channel 'fax'"),
        ("fax=", "unknown channel 'fax'"),
        ("api=no-such-workflow", "unknown workflow 'no-such-workflow'"),
    ],
)
def test_bad_routes_are_refused_before_touching_the_database(capsys, monkeypatch, route, message):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    code, err = run(capsys, "project", "routes", "demo", route)
    assert code == 2
    assert message in err


def test_a_channel_routed_twice_in_one_command_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    code, err = run(capsys, "project", "routes", "demo", "api=noop-3", "api=")
    assert code == 2
    assert "channel 'api' is given more than once" in err


def test_missing_configuration_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.delenv("AWOOOP_DATABASE_URL", raising=False)
    code, err = run(capsys, "project", "routes", "demo", "api=noop-3")
    assert code == 2
    assert "AWOOOP_DATABASE_URL is not set" in err


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("project", "migrate", "workflows", "dev"):
        assert command in out


def test_version_is_the_installed_package_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])

    assert exited.value.code == 0
    assert capsys.readouterr().out == f"awooop {version('awooop')}\n"


def test_dev_key_prints_a_usable_secret_key(capsys):
    from awooop.secrets import SecretBox

    assert cli.main(["dev", "key"]) == 0
    key = capsys.readouterr().out.strip()
    assert SecretBox(key).decrypt(SecretBox(key).encrypt("x")) == "x"


def test_metrics_reset_deletes_only_metric_files(capsys, tmp_path):
    (tmp_path / "counter_123.db").write_bytes(b"x")
    (tmp_path / "histogram_123.db").write_bytes(b"x")
    (tmp_path / "keep.txt").write_text("not a metric file")

    code = cli.main(["metrics", "reset", "--dir", str(tmp_path)])

    assert code == 0
    # (awooop.lock stays: the lock processes of the directory share, awooop.metric_files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["awooop.lock", "keep.txt"]
    assert "removed 2 metric file(s)" in capsys.readouterr().out


def test_metrics_reset_counts_only_the_files_it_found(tmp_path):
    # A command of its own, as an operator types it: PROMETHEUS_MULTIPROC_DIR exported, the
    # directory new. The command's own metric files are not among those it says it removed.
    directory = tmp_path / "metrics"
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}

    result = subprocess.run(
        [str(BIN / "awooop"), "metrics", "reset"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"removed 0 metric file(s) from {directory}\n"
    assert [p.name for p in directory.iterdir()] == ["awooop.lock"]


def test_metrics_reset_without_a_directory_is_refused(capsys, monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)

    code, err = run(capsys, "metrics", "reset")

    assert code == 2
    assert "PROMETHEUS_MULTIPROC_DIR is not set" in err


# --- configuration: where it is found, what is shown, how it is refused ----------------------

CANARY = "s3cret-canary-pw"


@pytest.fixture
def bare_env(monkeypatch, tmp_path):
    """No AWOOOP_* variable, and a current directory with no .awooop/env above it."""
    import os

    for name in list(os.environ):
        if name.startswith("AWOOOP_") or name in ("PROMETHEUS_MULTIPROC_DIR", "FLOWER_BASIC_AUTH"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def env_file(root, **values: str):
    from awooop import devstack

    (root / ".awooop").mkdir()
    devstack.write_env(root / ".awooop" / "env", values)
    return root / ".awooop" / "env"


def configured(**extra: str) -> dict[str, str]:
    from awooop import secrets

    return {
        "AWOOOP_DATABASE_URL": f"postgresql+psycopg2://awooop:{CANARY}@127.0.0.1:1/awooop",
        "AWOOOP_BROKER_URL": f"redis://default:{CANARY}@127.0.0.1:1/0",
        "AWOOOP_SECRET_KEY": secrets.new_encryption_key(),
        **extra,
    }


def test_config_prints_every_setting_its_source_and_no_secret(capsys, monkeypatch, bare_env):
    from awooop import config

    values = configured(FLOWER_BASIC_AUTH=f"admin:{CANARY}")
    for name, value in values.items():
        monkeypatch.setenv(name, value)

    code = cli.main(["config"])

    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    lines = {line.partition("=")[0]: line for line in out.splitlines()}
    assert set(lines) == config.SETTING_VARIABLES | set(config.OTHER_VARIABLES)
    assert lines["AWOOOP_DATABASE_URL"].startswith(
        "AWOOOP_DATABASE_URL=postgresql+psycopg2://awooop:***@127.0.0.1:1/awooop"
    )
    assert lines["AWOOOP_DATABASE_URL"].endswith("# environment")
    assert lines["AWOOOP_LEASE_TTL_SECONDS"].split() == [
        "AWOOOP_LEASE_TTL_SECONDS=300",
        "#",
        "default",
    ]
    assert lines["FLOWER_BASIC_AUTH"].startswith("FLOWER_BASIC_AUTH=admin:***")
    assert CANARY not in out and values["AWOOOP_SECRET_KEY"] not in out


def test_config_json_names_the_env_file_it_read(capsys, monkeypatch, bare_env):
    import json

    values = configured()
    path = env_file(bare_env, **values)
    (bare_env / "sub").mkdir()
    monkeypatch.chdir(bare_env / "sub")

    code = cli.main(["config", "--json"])

    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 0
    assert report["env_file"] == str(path)
    assert f"awooop: using {path}" in err
    rows = {row["variable"]: row for row in report["settings"]}
    assert rows["AWOOOP_SECRET_KEY"] == {
        "variable": "AWOOOP_SECRET_KEY",
        "value": "***",
        "source": f"env file {path}",
    }
    assert rows["AWOOOP_TASK_EVENTS"]["value"] is True
    assert CANARY not in out + err and values["AWOOOP_SECRET_KEY"] not in out + err


def test_config_exits_2_with_every_problem_on_one_line(capsys, monkeypatch, bare_env):
    for name, value in configured(
        AWOOOP_DATABASE_URL=f"mysql://u:{CANARY}@h/db", AWOOOP_TASK_EVENTS="maybe"
    ).items():
        monkeypatch.setenv(name, value)

    code = cli.main(["config"])

    out, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(
        "awooop: error: AWOOOP_DATABASE_URL=mysql://u:***@h/db"
    )
    assert "AWOOOP_TASK_EVENTS='maybe' is not a boolean" in err
    assert "AWOOOP_DATABASE_URL=mysql://u:***@h/db" in out  # shown as given, masked
    assert CANARY not in out + err


def test_a_command_refuses_a_bad_database_url_without_showing_its_password(
    capsys, monkeypatch, bare_env
):
    for name, value in configured(AWOOOP_DATABASE_URL=f"postgres://u:{CANARY}@h/db").items():
        monkeypatch.setenv(name, value)

    code, err = run(capsys, "project", "create", "ops")

    assert code == 2
    assert err == (
        "awooop: error: AWOOOP_DATABASE_URL=postgres://u:***@h/db: driver 'postgres' is not "
        "supported; use postgresql+psycopg2://user:password@host:5432/database\n"
    )


def test_an_unreachable_database_is_one_line_without_the_password(capsys, monkeypatch, bare_env):
    for name, value in configured().items():
        monkeypatch.setenv(name, value)

    code, err = run(capsys, "project", "create", "ops")

    assert code == 1
    assert err.startswith("awooop: error: cannot use the database (AWOOOP_DATABASE_URL): ")
    assert err.count("\n") == 1 and "Traceback" not in err and CANARY not in err


def test_a_missing_setting_says_the_env_file_was_not_read_and_why(capsys, monkeypatch, bare_env):
    env_file(bare_env, **configured())
    monkeypatch.setenv("AWOOOP_BROKER_URL", "redis://elsewhere:6379/0")

    code, err = run(capsys, "project", "create", "ops")

    assert code == 2
    assert "AWOOOP_DATABASE_URL and AWOOOP_SECRET_KEY are not set" in err
    assert ".awooop/env is not read while the environment sets AWOOOP_BROKER_URL" in err


def test_a_setting_that_names_no_deployment_is_added_to_the_env_file(monkeypatch, bare_env):
    path = env_file(bare_env, **configured())
    monkeypatch.setenv("AWOOOP_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("AWOOOP_WORKFLOW_MODULES", "tests.support.workflows")

    environment = config.discover()

    assert environment.env_file == path
    assert environment.values["AWOOOP_DATABASE_URL"] == configured()["AWOOOP_DATABASE_URL"]
    assert environment.source("AWOOOP_WORKFLOW_MODULES") == "environment"
    assert environment.source("AWOOOP_DATABASE_URL") == f"env file {path}"


def test_with_no_env_file_the_error_says_where_it_looked(capsys, bare_env):
    code, err = run(capsys, "project", "create", "ops")

    assert code == 2
    assert f"(no .awooop/env in {bare_env} or its parents)" in err


def test_metrics_reset_finds_the_directory_in_the_env_file(capsys, bare_env):
    metrics = bare_env / "metrics"
    metrics.mkdir()
    (metrics / "counter_1.db").write_bytes(b"x")
    path = env_file(bare_env, **configured(PROMETHEUS_MULTIPROC_DIR=str(metrics)))

    code = cli.main(["metrics", "reset"])

    out, err = capsys.readouterr()
    # The lock file that keeps two hosts' processes out of one directory stays.
    assert code == 0 and [f.name for f in metrics.iterdir()] == ["awooop.lock"]
    assert f"removed 1 metric file(s) from {metrics}" in out
    assert f"awooop: using {path}" in err


def test_dev_up_prints_the_service_urls_without_their_passwords(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", "postgresql+psycopg2://u:db-secret@127.0.0.1:1/d")
    monkeypatch.setenv("AWOOOP_BROKER_URL", "redis://:broker-secret@127.0.0.1:1/0")

    assert cli.main(["dev", "--state-dir", str(tmp_path), "up"]) == 0

    out = capsys.readouterr().out
    assert "AWOOOP_DATABASE_URL=postgresql+psycopg2://u:***@127.0.0.1:1/d  (configured)" in out
    assert "AWOOOP_BROKER_URL=redis://:***@127.0.0.1:1/0  (configured)" in out
    assert "secret" not in out


SITE_MODULE = """
from awooop.domain.workflow import Step, Workflow
from awooop.workflows.registry import register


def check(ctx):
    return {}


SITE_RESTART = register(
    Workflow("site-restart", 2, [Step("check", check)], description="the site's own")
)
"""


@pytest.fixture
def site_module(monkeypatch, bare_env):
    """A deployment's workflow module, importable, registering into a registry of its own."""
    import sys

    from awooop.workflows import registry

    registry.load()
    monkeypatch.setattr(registry, "_WORKFLOWS", dict(registry._WORKFLOWS))
    (bare_env / "site_workflows.py").write_text(SITE_MODULE)
    monkeypatch.syspath_prepend(str(bare_env))
    yield "site_workflows"
    sys.modules.pop("site_workflows", None)


def test_workflows_lists_those_of_the_deployments_modules_with_the_built_in_ones(
    capsys, site_module, bare_env
):
    # Given a deployment that names its own module, as its processes read it
    env_file(bare_env, **configured(AWOOOP_WORKFLOW_MODULES=site_module))

    code = cli.main(["workflows"])

    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert "site-restart v2  max_attempts=3  check  the site's own" in lines
    assert any(line.startswith("chatops v2 ") for line in lines)


def test_workflows_names_the_variable_when_a_module_does_not_import(capsys, bare_env):
    env_file(bare_env, **configured(AWOOOP_WORKFLOW_MODULES="no_such_site_module"))

    code, err = run(capsys, "workflows")

    assert code == 2
    assert "AWOOOP_WORKFLOW_MODULES: cannot import 'no_such_site_module'" in err
