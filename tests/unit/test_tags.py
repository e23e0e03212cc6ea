"""Run tags (ctx.tag): the bounds a step's tags are checked against, and how a run's tags
follow from its journal."""

from __future__ import annotations

import pytest

from awooop.domain import tags
from awooop.domain.workflow import StepContext


def _ctx(**existing: str) -> StepContext:
    return StepContext(
        run_id="r",
        project_id="p",
        input={},
        outputs={},
        step="s",
        attempt=1,
        effect_id="e",
        command_id="c",
        run_tags=existing,
    )


def test_tags_are_kept_on_the_context_until_the_attempt_is_recorded() -> None:
    ctx = _ctx()
    ctx.tag(service="db-1")
    ctx.tag({"k8s.ns": "web"}, service="db-2")

    assert ctx.tags_set == {"service": "db-2", "k8s.ns": "web"}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"": "x"}, "must be 1 to 64 characters"),
        ({"1st": "x"}, "must be 1 to 64 characters"),
        ({"has space": "x"}, "must be 1 to 64 characters"),
        ({"k" * 65: "x"}, "must be 1 to 64 characters"),
        ({"k": "v" * 257}, "at most 256 printable characters"),
        ({"k": "line\nbreak"}, "at most 256 printable characters"),
        ({"k": 1}, "at most 256 printable characters"),
        ({"k": "\ud800"}, "printable"),
        ({"k": "nul\x00"}, "printable"),
    ],
)
def test_a_bad_key_or_value_raises_tag_error_and_sets_nothing(given, message) -> None:
    ctx = _ctx()

    with pytest.raises(tags.TagError, match=message):
        ctx.tag(given)

    assert ctx.tags_set == {}


def test_the_longest_key_and_value_are_accepted() -> None:
    ctx = _ctx()
    ctx.tag({"k" * tags.MAX_KEY_LENGTH: "v" * tags.MAX_VALUE_LENGTH, "empty": ""})

    assert len(ctx.tags_set) == 2


def test_a_run_has_at_most_sixteen_tags_counting_those_it_has() -> None:
    ctx = _ctx(**{f"old{i}": "v" for i in range(10)})
    ctx.tag({f"new{i}": "v" for i in range(6)})
    ctx.tag(old1="replaced")  # replacing a value adds no tag

    with pytest.raises(tags.TagError, match="at most 16 tags; this would make 17"):
        ctx.tag(one_more="v")


def test_a_run_s_tags_are_its_journal_s_in_order() -> None:
    journal = [{"tags": {"a": "1", "b": "1"}}, {"step": "x"}, {"tags": {"a": "2"}}]

    assert tags.of_journal(journal) == {"a": "2", "b": "1"}
