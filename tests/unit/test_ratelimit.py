"""The fixed-window rate limiter over fakeredis: counting, windows, and failing open."""

from __future__ import annotations

import logging

import fakeredis
import pytest
import redis

from awooop.ratelimit import WINDOW_SECONDS, RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


@pytest.fixture
def limiter(server: fakeredis.FakeServer) -> RateLimiter:
    return RateLimiter(fakeredis.FakeRedis(server=server))


def test_a_window_admits_the_limit_then_refuses_with_the_time_left(limiter):
    decisions = [limiter.hit("p1", "ingress", 3) for _ in range(5)]

    assert [d.allowed for d in decisions] == [True, True, True, False, False]
    assert 0 < decisions[3].retry_after <= WINDOW_SECONDS


def test_projects_and_kinds_are_counted_apart(limiter):
    limiter.hit("p1", "ingress", 1)

    assert limiter.hit("p2", "ingress", 1).allowed
    assert limiter.hit("p1", "management", 1).allowed
    assert not limiter.hit("p1", "ingress", 1).allowed


def test_the_window_key_expires_so_a_new_window_admits_again(limiter, server):
    limiter.hit("p1", "ingress", 1)
    assert not limiter.hit("p1", "ingress", 1).allowed
    client = fakeredis.FakeRedis(server=server)
    key = next(iter(client.keys("awooop:rate:p1:ingress")))
    assert 0 < client.ttl(key) <= WINDOW_SECONDS

    client.delete(key)  # what expiry does at the end of the window

    assert limiter.hit("p1", "ingress", 1).allowed


def test_no_limit_never_asks_redis():
    class Exploding:
        def pipeline(self, *a, **k):
            raise AssertionError("Redis was asked")

    limiter = RateLimiter(Exploding())

    assert limiter.hit("p1", "ingress", None).allowed


def test_a_limit_of_zero_refuses_everything(limiter):
    assert not limiter.hit("p1", "ingress", 0).allowed


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_redis_down_fails_open_logs_and_backs_off(server):
    server.connected = False
    clock = Clock()
    limiter = RateLimiter(fakeredis.FakeRedis(server=server), retry_seconds=10, clock=clock)
    calls = 0
    real_pipeline = limiter._client.pipeline

    def counting_pipeline(*args, **kwargs):
        nonlocal calls
        calls += 1
        return real_pipeline(*args, **kwargs)

    limiter._client.pipeline = counting_pipeline
    records = Records()
    logging.getLogger("awooop.ratelimit").addHandler(records)
    try:
        first = [limiter.hit("p1", "ingress", 0) for _ in range(3)]
        clock.now += 11
        server.connected = True
        later = limiter.hit("p1", "ingress", 0)
    finally:
        logging.getLogger("awooop.ratelimit").removeHandler(records)

    assert [d.allowed for d in first] == [True, True, True]
    assert calls == 2  # the first failure, then not again until the back-off ended
    assert not later.allowed  # Redis is back: limits apply again
    unavailable = [
        r for r in records.records if getattr(r, "action", "") == "rate_limit_unavailable"
    ]
    assert len(unavailable) == 1


def test_without_a_redis_url_nothing_is_limited():
    assert RateLimiter.from_url("", 0.1, 1).hit("p1", "ingress", 0).allowed
    assert RateLimiter.from_url("amqp://guest@localhost//", 0.1, 1).hit("p1", "x", 0).allowed


def test_a_real_connection_error_is_caught():
    limiter = RateLimiter(redis.Redis(host="127.0.0.1", port=9, socket_connect_timeout=0.2))

    assert limiter.hit("p1", "ingress", 0).allowed
