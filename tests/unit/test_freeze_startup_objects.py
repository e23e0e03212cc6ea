"""A serving process leaves what it loaded at start-up out of the garbage collector's full
collections, after collecting what was already garbage."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from awooop import bootstrap
from awooop.web import gunicorn_hooks


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_what_lives_at_start_up_is_frozen_and_garbage_is_collected_first() -> None:
    kept = Node()
    cycle_a, cycle_b = Node(), Node()
    cycle_a.other, cycle_b.other = cycle_b, cycle_a
    garbage = weakref.ref(cycle_a)
    del cycle_a, cycle_b  # unreachable, but only a collection frees a cycle
    assert gc.get_freeze_count() == 0

    bootstrap.freeze_startup_objects()

    assert garbage() is None
    assert gc.get_freeze_count() > 0
    assert gc.is_tracked(kept) and kept not in gc.get_objects()  # out of every generation


def test_a_gunicorn_web_process_freezes_once_it_has_loaded_the_application() -> None:
    gunicorn_hooks.post_worker_init(worker=None)
    assert gc.get_freeze_count() > 0
