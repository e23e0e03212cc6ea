"""The per-process cache of project routes and credential hashes, with an injected clock."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from awooop.store import projects
from awooop.web import auth
from tests.support import metrics


class TickingClock:
    """A clock that moves one second forward every time it is read, so an entry that is alive
    at one reading can be expired at the next — whatever happens in between."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        value = self.now
        self.now += 1.0
        return value


class FakeEngine:
    """Only ``connect()``: the cache hands the connection to ``projects.load_auth``."""

    @contextlib.contextmanager
    def connect(self) -> Iterator[object]:
        yield object()


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def load_auth(conn: object, project_id: str, channel: str) -> None:
        calls.append(project_id)
        return None  # an unknown project is cached too

    monkeypatch.setattr(projects, "load_auth", load_auth)
    return calls


def test_an_entry_expiring_between_two_clock_readings_is_a_miss_not_a_key_error(loads):
    # Given an entry stored at t=0 with a 1.5 s lifetime, on a clock that ticks on every read:
    # alive at the next reading (t=1), expired at the one after (t=2).
    cache = auth.ProjectAuthCache(1.5, timer=TickingClock())
    engine = FakeEngine()
    assert cache.load(engine, "p1", "telegram") is None

    # When it is looked up again (a membership test then a lookup would straddle the expiry)
    cached = cache.load(engine, "p1", "telegram")

    # Then it is read once, from the cache, without a KeyError; and once expired it is reloaded.
    assert cached is None
    assert loads == ["p1"]
    cache.load(engine, "p1", "telegram")
    assert loads == ["p1", "p1"]


def test_each_database_read_counts_one_auth_load_and_a_cached_answer_none(loads):
    # Given a cache whose entries live 1.5 s on a clock that ticks a second per reading
    cache = auth.ProjectAuthCache(1.5, timer=TickingClock())
    engine = FakeEngine()
    before = metrics.local("awooop_project_auth_loads_total")

    # When the project is looked up three times: a miss, a hit, then a miss again (expired)
    for _ in range(3):
        cache.load(engine, "p1", "telegram")

    # Then two reads reached the database and the counter says two
    assert loads == ["p1", "p1"]
    assert metrics.local("awooop_project_auth_loads_total") - before == 2


def test_a_malformed_project_id_is_no_auth_load(loads):
    cache = auth.ProjectAuthCache(5.0)
    before = metrics.local("awooop_project_auth_loads_total")

    assert cache.load(FakeEngine(), "not a project id!", "api") is None

    assert loads == []
    assert metrics.local("awooop_project_auth_loads_total") == before


def test_a_fresh_load_reads_the_database_and_keeps_what_it_read(loads):
    # Given a project's entry kept for a minute
    cache = auth.ProjectAuthCache(60, timer=lambda: 0.0)
    engine = FakeEngine()
    cache.load(engine, "p1", "api")

    # When it is loaded fresh, then as usual
    cache.load(engine, "p1", "api", fresh=True)
    cache.load(engine, "p1", "api")

    # Then the fresh load read the database, and the next one used what it read
    assert loads == ["p1", "p1"]
