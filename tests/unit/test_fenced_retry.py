"""The fenced-write retry policy (engine/fenced.py): which errors are retried, how often,
and that a write whose lease is known to be lost is not retried (each try may wait out a
lock timeout while the worker takes no new work)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator

import psycopg2
import pytest
from sqlalchemy import Engine, create_engine, exc

from awooop.config import Settings
from awooop.engine import fenced

SETTINGS = Settings(write_retries=3, write_retry_base_seconds=0.001, write_retry_max_seconds=0.01)


class LockTimeout(psycopg2.OperationalError):
    pgcode = "55P03"


def _failing(calls: list[int]):
    def statement(conn):
        calls.append(1)
        raise exc.OperationalError("UPDATE awooop_run_state …", {}, LockTimeout("lock timeout"))

    return statement


@pytest.fixture
def engine() -> Iterator[Engine]:
    """A stand-in engine (the statements fail before using it), closed after the test: an
    unclosed sqlite3 connection is a ResourceWarning, an error, on Python 3.13."""
    engine = create_engine("sqlite://")
    yield engine
    engine.dispose()


def test_a_transient_error_is_retried_then_given_up(engine):
    calls: list[int] = []
    with pytest.raises(fenced.GaveUp):
        fenced.run_with_retries(engine, SETTINGS, _failing(calls), "record")
    assert len(calls) == 4  # the first try and three retries


def test_a_write_whose_lease_is_lost_is_not_retried(engine):
    calls: list[int] = []
    with pytest.raises(fenced.GaveUp):
        fenced.run_with_retries(engine, SETTINGS, _failing(calls), "record", lambda: True)
    assert len(calls) == 1


def test_a_write_that_is_wrong_is_not_retried(engine):
    calls: list[int] = []

    def statement(conn):
        calls.append(1)
        raise exc.ProgrammingError("UPDATE …", {}, psycopg2.ProgrammingError("syntax error"))

    with pytest.raises(exc.ProgrammingError):
        fenced.run_with_retries(engine, SETTINGS, statement, "record")
    assert calls == [1]


def test_the_back_off_grows_to_its_cap_with_jitter():
    settings = dataclasses.replace(
        SETTINGS, write_retry_base_seconds=0.1, write_retry_max_seconds=0.5
    )
    rng = random.Random(1)
    delays = [fenced.backoff(settings, retry, rng) for retry in range(5)]
    assert 0.05 <= delays[0] <= 0.1 and 0.1 <= delays[1] <= 0.2
    assert all(0.25 <= d <= 0.5 for d in delays[3:])
