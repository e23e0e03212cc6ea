"""The failover verdict (:func:`awooop.failover.judge`) over every shape of replication state,
and the settings that steer it and the replica reads; the same verdicts against a real primary
and standby are in tests/integration/test_replication.py."""

from __future__ import annotations

import pytest

from awooop import failover
from awooop.config import ConfigError, Settings
from awooop.store.replication import Replication, Standby

REQUIRED: dict[str, str] = {"AWOOOP_DATABASE_URL": "postgresql+psycopg2://u@h/db"}


def state(
    *standbys: tuple[str, str | None],
    names: str = "*",
    commit: str = "on",
    in_recovery: bool = False,
) -> Replication:
    return Replication(in_recovery, names, commit, tuple(Standby(n, s) for n, s in standbys))


@pytest.mark.parametrize(
    ("found", "verdict", "said"),
    [
        (state(), failover.SAFE, "no standby"),
        (state(names=""), failover.SAFE, "no standby"),
        (state(("a", "sync")), failover.SAFE, "synchronous standby"),
        (state(("a", "quorum"), ("b", "quorum")), failover.SAFE, "synchronous standby"),
        (state(("a", "sync"), ("b", "async")), failover.SAFE, "synchronous standby"),
        (state(("a", "sync"), commit="remote_apply"), failover.SAFE, "synchronous standby"),
        (state(("a", "async")), failover.AT_RISK, "a: async"),
        (state(("a", "potential"), ("b", "async")), failover.AT_RISK, "2 standbys attached"),
        (state(("a", "async"), names=" "), failover.AT_RISK, "synchronous_standby_names"),
        (state(("a", "sync"), commit="local"), failover.AT_RISK, "synchronous_commit is local"),
        (state(("a", "sync"), commit="off"), failover.AT_RISK, "synchronous_commit is off"),
        (state(("a", None)), failover.UNKNOWN, "pg_monitor"),
        (state(("a", None), names=""), failover.AT_RISK, "synchronous_standby_names"),
        (state(("a", "async"), in_recovery=True), failover.STANDBY, "read-only"),
    ],
)
def test_the_verdict_of_each_replication_state(found, verdict, said):
    judged = failover.judge(found)
    assert judged.state == verdict
    assert said in judged.reason


def test_the_failover_check_is_warn_by_default_and_takes_refuse_and_off():
    assert Settings().database_failover_check == "warn"
    for value in ("refuse", "OFF", "Warn"):
        env = {**REQUIRED, "AWOOOP_DATABASE_FAILOVER_CHECK": value}
        assert Settings.from_env(env, ("database_url",)).database_failover_check == value.lower()
    with pytest.raises(ConfigError, match="AWOOOP_DATABASE_FAILOVER_CHECK='strict' is not one"):
        Settings.from_env(
            {**REQUIRED, "AWOOOP_DATABASE_FAILOVER_CHECK": "strict"}, ("database_url",)
        )


def test_a_replica_url_must_be_a_database_url_and_is_shown_masked():
    assert Settings().database_replica_url == ""
    good = {**REQUIRED, "AWOOOP_DATABASE_REPLICA_URL": "postgresql+psycopg2://u:pw@replica/db"}
    settings = Settings.from_env(good, ("database_url",))
    assert settings.database_replica_url.endswith("@replica/db")
    assert "pw" not in repr(settings)
    for bad, said in [
        ("mysql://u:secret@replica/db", "driver 'mysql' is not supported"),
        ("postgresql+psycopg2://u:secret@replica", "names no database"),
        ("not a url", "is not a database URL"),
    ]:
        with pytest.raises(ConfigError, match="AWOOOP_DATABASE_REPLICA_URL") as raised:
            Settings.from_env({**REQUIRED, "AWOOOP_DATABASE_REPLICA_URL": bad}, ("database_url",))
        assert said in str(raised.value)
        assert "secret" not in str(raised.value)
