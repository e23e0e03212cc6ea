"""Settings are checked when read, every problem named on one line, and no secret is ever shown:
not in ``repr``, not in an error, not in what ``awooop config`` prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from awooop import bootstrap, config, db, devstack, secrets
from awooop.config import ConfigError, Settings

CANARY = "s3cret-canary-pw"
KEY = secrets.new_encryption_key()
BASE = {
    "AWOOOP_DATABASE_URL": f"postgresql+psycopg2://awooop:{CANARY}@db.example:5432/awooop",
    "AWOOOP_BROKER_URL": f"redis://default:{CANARY}@redis.example:6379/0",
    "AWOOOP_SECRET_KEY": KEY,
}


def refused(**changes: str) -> str:
    """The one-line message refusing BASE with ``changes`` (AWOOOP_ prefix added)."""
    env = {**BASE, **{f"AWOOOP_{k}": v for k, v in changes.items()}}
    with pytest.raises(ConfigError) as error:
        Settings.from_env(env)
    message = str(error.value)
    assert "\n" not in message
    return message


# --- booleans -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [("1", True), ("true", True), ("Yes", True), ("ON", True)]
    + [("0", False), ("false", False), ("no", False), ("Off", False)],
)
def test_booleans_take_the_usual_spellings(raw, value):
    settings = Settings.from_env({**BASE, "AWOOOP_MANUAL_CLOSE_ENABLED": raw})

    assert settings.manual_close_enabled is value


@pytest.mark.parametrize("raw", ["2", "maybe", "enabled", "-1"])
def test_anything_else_for_a_boolean_is_refused_naming_the_variable(raw):
    message = refused(TASK_EVENTS=raw)

    assert f"AWOOOP_TASK_EVENTS={raw!r} is not a boolean" in message


# --- behind a transaction pooler (PgBouncer) -------------------------------------------------


def test_prepared_statements_and_session_options_are_on_by_default():
    for settings in (Settings(), Settings.from_env(BASE)):
        assert settings.database_prepared_statements is True
        assert settings.database_session_options is True


def test_prepared_statements_and_session_options_can_be_turned_off():
    settings = Settings.from_env(
        {
            **BASE,
            "AWOOOP_DATABASE_PREPARED_STATEMENTS": "false",
            "AWOOOP_DATABASE_SESSION_OPTIONS": "0",
        }
    )

    assert settings.database_prepared_statements is False
    assert settings.database_session_options is False


@pytest.mark.parametrize("name", ["DATABASE_PREPARED_STATEMENTS", "DATABASE_SESSION_OPTIONS"])
def test_the_pooler_settings_must_be_booleans(name):
    assert f"AWOOOP_{name}='transaction' is not a boolean" in refused(**{name: "transaction"})


def test_without_session_options_no_libpq_options_are_sent_and_the_rest_stays():
    on = db.connect_args(Settings(), db.WORKER)
    off = db.connect_args(Settings(database_session_options=False), db.WORKER)

    assert on["options"] == "-c statement_timeout=30000 -c lock_timeout=10000"
    assert "options" not in off
    assert off == {k: v for k, v in on.items() if k != "options"}


def test_the_engine_carries_whether_its_statements_are_prepared():
    url = "postgresql+psycopg2://u@h/d"  # an engine connects on first use only

    prepared = db.make_engine(url, 1)
    plain = db.make_engine(url, 1, settings=Settings(database_prepared_statements=False))

    assert prepared.get_execution_options()["awooop_prepare"] is True
    assert plain.get_execution_options()["awooop_prepare"] is False
    # ... and so do its keeper's pool and its transactions (db.transaction)
    transactions = plain.execution_options(isolation_level="READ COMMITTED")
    assert db.keeper_engine(plain).get_execution_options()["awooop_prepare"] is False
    assert transactions.get_execution_options()["awooop_prepare"] is False


def test_the_start_up_line_says_where_the_timeouts_come_from(caplog):
    caplog.set_level("INFO", logger="awooop.config")

    bootstrap.log_settings(Settings.from_env(BASE), "web")
    bootstrap.log_settings(
        Settings.from_env({**BASE, "AWOOOP_DATABASE_SESSION_OPTIONS": "false"}), "worker"
    )

    on, off = (r.__dict__ for r in caplog.records if r.__dict__["action"] == "settings_loaded")
    assert on["database_timeouts"] == "sent as session options"
    assert off["database_timeouts"].startswith("not sent: set on the server")
    assert on["prepared_statements"] is True


# --- numbers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("TIMER_BATCH_SIZE", "0"),
        ("PRUNE_BATCH_SIZE", "-5"),
        ("ORPHAN_INTERVAL_SECONDS", "0"),
        ("OUTBOX_SEND_TIMEOUT_SECONDS", "-1"),
        ("DB_STATEMENT_TIMEOUT_WORKER_SECONDS", "0"),
        ("READINESS_TIMEOUT_SECONDS", "0"),
        ("WEB_WORKERS", "0"),
    ],
)
def test_batch_sizes_intervals_and_timeouts_must_be_positive(name, raw):
    assert f"AWOOOP_{name}={raw} must be positive" in refused(**{name: raw})


def test_the_step_timeout_is_fifteen_minutes_unless_set_and_must_be_a_positive_number():
    assert Settings.from_env(BASE).step_timeout_seconds == 900.0
    chosen = Settings.from_env({**BASE, "AWOOOP_STEP_TIMEOUT_SECONDS": "60"})
    assert chosen.step_timeout_seconds == 60

    assert "AWOOOP_STEP_TIMEOUT_SECONDS=0 must be positive" in refused(STEP_TIMEOUT_SECONDS="0")
    assert "AWOOOP_STEP_TIMEOUT_SECONDS='soon' is not a number" in refused(
        STEP_TIMEOUT_SECONDS="soon"
    )
    assert "AWOOOP_STEP_TIMEOUT_SECONDS='inf' is not a finite number" in refused(
        STEP_TIMEOUT_SECONDS="inf"
    )


def test_a_stranded_run_fails_after_fifteen_minutes_unless_set_and_never_at_once():
    assert Settings.from_env(BASE).workflow_unavailable_fail_after_seconds == 900.0
    chosen = Settings.from_env({**BASE, "AWOOOP_WORKFLOW_UNAVAILABLE_FAIL_AFTER_SECONDS": "3600"})
    assert chosen.workflow_unavailable_fail_after_seconds == 3600

    assert "AWOOOP_WORKFLOW_UNAVAILABLE_FAIL_AFTER_SECONDS=0 must be positive" in refused(
        WORKFLOW_UNAVAILABLE_FAIL_AFTER_SECONDS="0"
    )
    assert "AWOOOP_WORKFLOW_UNAVAILABLE_FAIL_AFTER_SECONDS='inf' is not a finite number" in (
        refused(WORKFLOW_UNAVAILABLE_FAIL_AFTER_SECONDS="inf")
    )


def test_zero_is_allowed_where_it_means_never():
    settings = Settings.from_env(
        {**BASE, "AWOOOP_AUTH_CACHE_SECONDS": "0", "AWOOOP_WRITE_RETRIES": "0"}
    )

    assert (settings.auth_cache_seconds, settings.write_retries) == (0, 0)
    assert "AWOOOP_AUTH_CACHE_SECONDS=-1 must be 0 or more" in refused(AUTH_CACHE_SECONDS="-1")


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf"])
def test_numbers_must_be_finite(raw):
    assert f"AWOOOP_LEASE_TTL_SECONDS={raw!r} is not a finite number" in refused(
        LEASE_TTL_SECONDS=raw
    )


def test_whole_numbers_and_ports_are_checked():
    assert "AWOOOP_TIMER_BATCH_SIZE='1.5' is not a whole number" in refused(TIMER_BATCH_SIZE="1.5")
    assert "AWOOOP_PORT=70000 is not a port number (1-65535)" in refused(PORT="70000")


@pytest.mark.parametrize("raw", ["\u0665", "5_000", "\uff15"])
def test_numbers_are_ascii_decimal_as_the_configuration_page_says(raw):
    # int() and float() alone would read these as 5, 5000 and 5
    assert f"AWOOOP_TIMER_BATCH_SIZE={raw!r} is not a whole number" in refused(TIMER_BATCH_SIZE=raw)
    assert f"AWOOOP_LEASE_TTL_SECONDS={raw!r} is not a number" in refused(LEASE_TTL_SECONDS=raw)


# --- relations ------------------------------------------------------------------------------


def test_a_schedule_lateness_bound_under_two_sweep_intervals_is_refused():
    message = refused(SCHEDULE_INTERVAL_SECONDS="60", SCHEDULE_MAX_LATENESS_SECONDS="100")

    assert (
        "AWOOOP_SCHEDULE_MAX_LATENESS_SECONDS=100 must be at least twice "
        "AWOOOP_SCHEDULE_INTERVAL_SECONDS=60" in message
    )


def test_a_reaper_slower_than_the_lease_is_refused_naming_both_variables():
    message = refused(REAPER_INTERVAL_SECONDS="300")

    assert (
        "AWOOOP_REAPER_INTERVAL_SECONDS=300 must be less than AWOOOP_LEASE_TTL_SECONDS=300"
        in message
    )


def test_a_back_off_base_above_its_maximum_is_refused():
    assert (
        "AWOOOP_WRITE_RETRY_BASE_SECONDS=5 must be at most AWOOOP_WRITE_RETRY_MAX_SECONDS=2"
        in refused(WRITE_RETRY_BASE_SECONDS="5")
    )
    assert (
        "AWOOOP_OUTBOX_BASE_DELAY_SECONDS=600 must be at most AWOOOP_OUTBOX_MAX_DELAY_SECONDS=300"
        in refused(OUTBOX_BASE_DELAY_SECONDS="600")
    )


def test_a_default_rerun_rate_above_the_most_a_request_may_ask_is_refused():
    assert (
        "AWOOOP_RERUN_RATE_PER_SECOND=60 must be at most AWOOOP_RERUN_MAX_RATE_PER_SECOND=50"
        in refused(RERUN_RATE_PER_SECOND="60")
    )


def test_every_problem_is_reported_at_once_on_one_line():
    message = refused(PORT="eighty", TASK_EVENTS="maybe", LOG_LEVEL="loud")

    for name in ("AWOOOP_PORT", "AWOOOP_TASK_EVENTS", "AWOOOP_LOG_LEVEL"):
        assert name in message


def test_log_level_is_any_case_and_must_be_one_of_the_levels():
    assert Settings.from_env({**BASE, "AWOOOP_LOG_LEVEL": "debug"}).log_level == "DEBUG"
    assert "AWOOOP_LOG_LEVEL='loud' is not a log level" in refused(LOG_LEVEL="loud")


def test_workflow_modules_must_be_module_names():
    assert "'my workflows' is not a module name" in refused(WORKFLOW_MODULES="ok.mod,my workflows")


# --- URLs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg2://u:p@h:5432/db",
        "postgresql://u@h/db",
        "postgresql+psycopg2://u@/db?host=/var/run/postgresql",
    ],
)
def test_postgresql_urls_of_the_shipped_driver_are_accepted(url):
    assert Settings.from_env({**BASE, "AWOOOP_DATABASE_URL": url}).database_url == url


MULTI_HOST = (
    "postgresql+psycopg2://u@/db?host=pg1:5432&host=pg2:5433&target_session_attrs=read-write"
)


def test_a_multi_host_url_is_accepted_and_reaches_libpq_with_every_host():
    # The routing a Patroni cluster documents: libpq tries each host, keeps the writable one.
    settings = Settings.from_env({**BASE, "AWOOOP_DATABASE_URL": MULTI_HOST})
    engine = db.make_engine(settings.database_url, pool_size=1, settings=settings)
    try:
        _args, params = engine.dialect.create_connect_args(engine.url)
    finally:
        engine.dispose()

    assert settings.database_url == MULTI_HOST
    assert params["host"] == "pg1,pg2"
    assert params["port"] == "5432,5433"
    assert params["target_session_attrs"] == "read-write"
    assert params["dbname"] == "db"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"mysql://u:{CANARY}@h/db", "driver 'mysql' is not supported"),
        (f"postgres://u:{CANARY}@h/db", "driver 'postgres' is not supported"),
        (f"postgresql+asyncpg://u:{CANARY}@h/db", "driver 'postgresql+asyncpg' is not supported"),
        (f"postgresql+psycopg2://u:{CANARY}@h:port/db", "its port is not a number"),
        (f"postgresql+psycopg2://u:{CANARY}@h:5432", "names no database"),
        (f"u:{CANARY}@h/db", "is not a database URL"),
        (f"postgresql+psycopg2://u:{CANARY}@x@h:5432/db", "write an '@' in the user name"),
        (f"postgresql+psycopg2://u@h:x/db?password={CANARY}", "its port is not a number"),
    ],
)
def test_a_bad_database_url_is_refused_without_showing_its_password(url, says):
    message = refused(DATABASE_URL=url)

    assert message.startswith("AWOOOP_DATABASE_URL=")
    assert says in message
    assert CANARY not in message


def test_a_refused_database_url_comes_with_an_example():
    assert "use postgresql+psycopg2://user:password@host:5432/database" in refused(
        DATABASE_URL="mysql://u@h/db"
    )


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "rediss://:pw@redis.example:6380/1",
        "amqp://guest:guest@rabbit.example:5672//",
        "redis://a:6379/0;redis://b:6379/0",
    ],
)
def test_redis_and_rabbitmq_broker_urls_are_accepted(url):
    assert Settings.from_env({**BASE, "AWOOOP_BROKER_URL": url}).broker_url == url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"kafka://u:{CANARY}@h:9092", "is not a redis:// rediss://"),
        (f"redis://default:{CANARY}@h:port/0", "its port is not a number"),
        (f"redis://default:{CANARY}@h:6379/zero", "must be a Redis database number"),
        (f"{CANARY}", "is not a redis:// rediss://"),
    ],
)
def test_a_bad_broker_url_is_refused_without_showing_its_password(url, says):
    message = refused(BROKER_URL=url)

    assert message.startswith("AWOOOP_BROKER_URL=")
    assert says in message
    if "@" in url:
        assert CANARY not in message


def test_other_urls_are_checked():
    assert "is not an http:// or https:// URL" in refused(PUBLIC_BASE_URL="awooop.example.com")
    assert "AWOOOP_RATE_LIMIT_REDIS_URL=amqp://h// is not a redis:// rediss:// unix://" in (
        refused(RATE_LIMIT_REDIS_URL="amqp://h//")
    )


def test_a_secret_key_that_is_not_a_fernet_key_is_refused_without_showing_it():
    message = refused(SECRET_KEY=CANARY)

    assert "AWOOOP_SECRET_KEY is not a Fernet key" in message
    assert "awooop dev key" in message
    assert CANARY not in message


# --- masking --------------------------------------------------------------------------------


def test_repr_masks_url_passwords_and_the_secret_key():
    settings = Settings.from_env(
        {**BASE, "AWOOOP_RATE_LIMIT_REDIS_URL": f"rediss://:{CANARY}@limits.example:6380/2"}
    )

    shown = repr(settings)

    assert CANARY not in shown and KEY not in shown
    assert "postgresql+psycopg2://awooop:***@db.example:5432/awooop" in shown
    assert "redis://default:***@redis.example:6379/0" in shown
    assert "secret_key='***'" in shown
    assert CANARY not in str(settings) and CANARY not in f"{settings!r}"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"postgresql://u:{CANARY}@h/db", "postgresql://u:***@h/db"),
        (f"redis://:{CANARY}@h:6379/0", "redis://:***@h:6379/0"),
        (f"amqp://guest:{CANARY}@h//", "amqp://guest:***@h//"),
        (f"postgresql://u@h/db?password={CANARY}&x=1", "postgresql://u@h/db?password=***&x=1"),
        (f"redis://h/0;redis://u:{CANARY}@h2/0", "redis://h/0;redis://u:***@h2/0"),
        (f"redis://u:{CANARY}@h:port/0", "redis://u:***@h:port/0"),
        (f"u:{CANARY}@h", "***@h"),
        (f"x://u:p@{CANARY}@h/0", "x://u:***@h/0"),
        ("redis://h:6379/0", "redis://h:6379/0"),
    ],
)
def test_mask_url_hides_passwords_in_any_shape(url, shown):
    assert config.mask_url(url) == shown


# --- where settings come from ---------------------------------------------------------------


def write_env_file(root: Path, values: dict[str, str]) -> Path:
    (root / ".awooop").mkdir(parents=True)
    devstack.write_env(root / ".awooop" / "env", values)
    return root / ".awooop" / "env"


def test_the_env_file_dev_up_writes_is_read_back_the_same(tmp_path):
    values = {**BASE, "FLOWER_BASIC_AUTH": "admin:a b'c\"d$e", "PROMETHEUS_MULTIPROC_DIR": "/x y"}

    assert config.read_env_file(write_env_file(tmp_path, values)) == values


def test_the_nearest_env_file_is_found_from_a_subdirectory(tmp_path):
    path = write_env_file(tmp_path, BASE)
    below = tmp_path / "a" / "b"
    below.mkdir(parents=True)

    environment = config.discover({"PATH": "/bin"}, cwd=below)

    assert environment.env_file == path
    assert environment.values["AWOOOP_DATABASE_URL"] == BASE["AWOOOP_DATABASE_URL"]
    assert environment.source("AWOOOP_DATABASE_URL") == f"env file {path}"
    assert environment.source("AWOOOP_PORT") == "default"


@pytest.mark.parametrize(
    "deployment", ["AWOOOP_DATABASE_URL", "AWOOOP_BROKER_URL", "AWOOOP_SECRET_KEY"]
)
def test_a_deployment_setting_in_the_environment_means_no_env_file_is_read(tmp_path, deployment):
    write_env_file(tmp_path, BASE)

    environment = config.discover(
        {deployment: "set-by-the-shell", "AWOOOP_LOG_LEVEL": "DEBUG"}, cwd=tmp_path
    )

    assert environment.env_file is None
    assert {k for k in environment.values if k.startswith("AWOOOP_")} == {
        deployment,
        "AWOOOP_LOG_LEVEL",
    }
    assert environment.source("AWOOOP_LOG_LEVEL") == "environment"


def test_a_setting_naming_no_deployment_is_read_beside_the_env_file(tmp_path):
    write_env_file(tmp_path, BASE)

    environment = config.discover({"AWOOOP_LOG_LEVEL": "DEBUG"}, cwd=tmp_path)

    assert environment.env_file is not None
    assert environment.values["AWOOOP_LOG_LEVEL"] == "DEBUG"
    assert environment.source("AWOOOP_LOG_LEVEL") == "environment"
    assert environment.source("AWOOOP_DATABASE_URL") == f"env file {environment.env_file}"


def test_other_variables_in_the_environment_win_over_the_env_file(tmp_path):
    write_env_file(tmp_path, {**BASE, "FLOWER_BASIC_AUTH": "admin:from-file"})

    environment = config.discover({"FLOWER_BASIC_AUTH": "ops:from-env"}, cwd=tmp_path)

    assert environment.values["FLOWER_BASIC_AUTH"] == "ops:from-env"
    assert environment.source("FLOWER_BASIC_AUTH") == "environment"


def test_awooop_state_dir_names_the_env_file_to_read(tmp_path):
    path = write_env_file(tmp_path / "elsewhere", BASE)
    write_env_file(tmp_path / "here", {**BASE, "AWOOOP_PORT": "9999"})

    environment = config.discover({"AWOOOP_STATE_DIR": str(path.parent)}, cwd=tmp_path / "here")

    assert environment.env_file == path
    assert "AWOOOP_PORT" not in environment.values


def test_no_env_file_anywhere_leaves_the_environment_as_it_is(tmp_path):
    environment = config.discover({"PATH": "/bin"}, cwd=tmp_path)

    assert (environment.env_file, dict(environment.values)) == (None, {"PATH": "/bin"})


def test_describe_lists_every_setting_with_its_source_and_masks_secrets(tmp_path):
    path = write_env_file(tmp_path, {**BASE, "FLOWER_BASIC_AUTH": f"admin:{CANARY}"})
    environment = config.discover({"PATH": "/bin"}, cwd=tmp_path)

    report = config.describe(environment)

    rows = {row["variable"]: row for row in report["settings"]}
    assert set(rows) == config.SETTING_VARIABLES | set(config.OTHER_VARIABLES)
    assert rows["AWOOOP_DATABASE_URL"] == {
        "variable": "AWOOOP_DATABASE_URL",
        "value": "postgresql+psycopg2://awooop:***@db.example:5432/awooop",
        "source": f"env file {path}",
    }
    assert rows["AWOOOP_SECRET_KEY"]["value"] == "***"
    assert rows["FLOWER_BASIC_AUTH"]["value"] == "admin:***"
    assert rows["AWOOOP_LEASE_TTL_SECONDS"] == {
        "variable": "AWOOOP_LEASE_TTL_SECONDS",
        "value": 300.0,
        "source": "default",
    }
    assert report["problems"] == []
    assert CANARY not in repr(report) and KEY not in repr(report)


def test_describe_reports_problems_and_unknown_variables():
    environment = config.Environment(
        {**BASE, "AWOOOP_PORT": "eighty", "AWOOOP_LEASE_TTL": "5", "AWOOOP_TEST_REDIS_DB": "3"}
    )

    report = config.describe(environment)

    port = next(row for row in report["settings"] if row["variable"] == "AWOOOP_PORT")
    assert (port["value"], port["source"]) == ("eighty", "environment")
    assert report["problems"] == ["AWOOOP_PORT='eighty' is not a whole number"]
    assert report["notes"] == [
        "AWOOOP_LEASE_TTL is not a setting (did you mean AWOOOP_LEASE_TTL_SECONDS?)"
    ]


def test_describe_reports_a_workflow_module_that_does_not_exist():
    report = bootstrap.describe(
        config.Environment({**BASE, "AWOOOP_WORKFLOW_MODULES": "awooop_no_such.workflows"})
    )

    assert report["problems"] == [
        "AWOOOP_WORKFLOW_MODULES: cannot import 'awooop_no_such.workflows' "
        "(No module named 'awooop_no_such')"
    ]
