"""``sentinel://`` URLs: how they are read (:mod:`awooop.redis_client`) and checked with
``AWOOOP_BROKER_SENTINEL_MASTER`` (:mod:`awooop.config_checks`); no password is shown."""

from __future__ import annotations

import pytest

from awooop import redis_client
from awooop.config import ConfigError, Settings
from tests.unit.test_config import BASE, CANARY

SENTINELS = "sentinel://s1.example:26379;sentinel://s2.example:26380;sentinel://s3.example"


def refused(**changes: str) -> str:
    env = {**BASE, **{f"AWOOOP_{k}": v for k, v in changes.items()}}
    with pytest.raises(ConfigError) as error:
        Settings.from_env(env)
    message = str(error.value)
    assert "\n" not in message and CANARY not in message
    return message


def test_every_part_names_a_sentinel_and_the_first_the_masters_credentials_and_db():
    parsed = redis_client.parse_sentinel_url(
        f"sentinel://user:{CANARY}@s1.example:26379/3;sentinel://s2.example:26380"
    )

    assert parsed.sentinels == (("s1.example", 26379), ("s2.example", 26380))
    assert (parsed.username, parsed.password, parsed.db) == ("user", CANARY, 3)


def test_a_sentinel_without_a_port_is_on_26379():
    assert redis_client.parse_sentinel_url("sentinel://s3.example").sentinels == (
        ("s3.example", 26379),
    )


@pytest.mark.parametrize(
    ("url", "is_redis", "is_sentinel"),
    [
        ("redis://h:6379/0", True, False),
        ("rediss://h:6380/0", True, False),
        ("unix:///run/redis.sock", True, False),
        (SENTINELS, True, True),
        ("amqp://guest@h//", False, False),
        ("", False, False),
    ],
)
def test_which_urls_are_redis_and_which_name_sentinels(url, is_redis, is_sentinel):
    assert redis_client.is_redis_url(url) is is_redis
    assert redis_client.is_sentinel_url(url) is is_sentinel


def test_a_sentinel_broker_url_with_the_masters_name_is_accepted():
    settings = Settings.from_env(
        {**BASE, "AWOOOP_BROKER_URL": SENTINELS, "AWOOOP_BROKER_SENTINEL_MASTER": "mymaster"}
    )

    assert (settings.broker_url, settings.broker_sentinel_master) == (SENTINELS, "mymaster")
    assert settings.rate_limit_url == SENTINELS


def test_a_sentinel_broker_url_needs_the_masters_name():
    message = refused(BROKER_URL=SENTINELS)

    assert message == (
        "AWOOOP_BROKER_URL is a sentinel:// URL: set AWOOOP_BROKER_SENTINEL_MASTER to the "
        "name of the master its sentinels monitor"
    )


def test_a_sentinel_rate_limit_url_needs_the_masters_name():
    assert "AWOOOP_RATE_LIMIT_REDIS_URL is a sentinel:// URL: set" in refused(
        RATE_LIMIT_REDIS_URL=SENTINELS
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"sentinel://:{CANARY}@s1:26379;redis://s2:6379/0", "part 2 is not a sentinel:// URL"),
        (f"redis://:{CANARY}@s1:6379/0;sentinel://s2:26379", "part 1 is not a sentinel:// URL"),
        (f"sentinel://:{CANARY}@s1:port", "part 1: its port is not a number"),
        (f"sentinel://:{CANARY}@s1:26379/zero", "the path must be a Redis database number"),
        ("sentinel://:26379", "part 1 names no sentinel host"),
    ],
)
def test_a_bad_sentinel_url_is_refused_saying_why(url, says):
    message = refused(BROKER_URL=url, BROKER_SENTINEL_MASTER="mymaster")

    assert message.startswith("AWOOOP_BROKER_URL=")
    assert says in message


def test_the_masters_name_alone_with_a_plain_redis_url_is_harmless():
    settings = Settings.from_env({**BASE, "AWOOOP_BROKER_SENTINEL_MASTER": "mymaster"})

    assert settings.broker_sentinel_master == "mymaster"
