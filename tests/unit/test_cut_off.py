"""How long a worker process cut off from its database holds back from new run messages
(:func:`awooop.engine.cut_off.wait_for_database`), on a clock the test moves."""

from __future__ import annotations

import dataclasses

from awooop.config import Settings
from awooop.engine import cut_off

SETTINGS = dataclasses.replace(
    Settings(), worker_liveness_interval_seconds=5.0, worker_dead_after_seconds=20.0
)


class Database:
    """Answers from the ``answer_at``-th question on; each question takes ``asking`` s."""

    def __init__(self, answer_at: int | None, asking: float = 0.0) -> None:
        self.answer_at = answer_at
        self.asking = asking
        self.now = 0.0
        self.asked_at: list[float] = []

    def answers(self, engine: object) -> bool:
        self.asked_at.append(self.now)
        self.now += self.asking
        return self.answer_at is not None and len(self.asked_at) >= self.answer_at

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


def wait(database: Database) -> bool:
    return cut_off.wait_for_database(
        None,  # type: ignore[arg-type]  # only handed to `answers`
        SETTINGS,
        answers=database.answers,
        clock=database.clock,
        sleep=database.sleep,
    )


def test_it_returns_as_soon_as_the_database_answers_asking_at_the_liveness_pace():
    database = Database(answer_at=3, asking=2.0)  # a question that fails takes the timeout
    assert wait(database) is True
    assert database.asked_at == [0.0, 5.0, 10.0]
    assert database.now == 12.0


def test_a_database_that_answers_at_once_costs_one_question():
    database = Database(answer_at=1)
    assert wait(database) is True
    assert database.asked_at == [0.0]


def test_it_gives_up_after_dead_after_without_an_answer():
    database = Database(answer_at=None, asking=2.0)
    assert wait(database) is False
    # asked at the pace, the last time at the deadline itself
    assert database.asked_at == [0.0, 5.0, 10.0, 15.0, 20.0]
    assert database.now == 22.0


def test_it_gives_up_even_when_each_question_outlasts_the_pace():
    database = Database(answer_at=None, asking=8.0)
    assert wait(database) is False
    assert database.asked_at == [0.0, 8.0, 16.0]
    assert database.now == 24.0
