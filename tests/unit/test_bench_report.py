"""The markdown the benches write (bench.report): tables and the blocks between markers."""

from __future__ import annotations

from bench import report


def test_a_table_aligns_the_columns_not_named_to_the_right():
    lines = report.table("app | events | req/s | p99 ms", ["AwoooP | new | 1,200 | 9.5"], "ll")

    assert lines == [
        "| app | events | req/s | p99 ms |",
        "|---|---|---:|---:|",
        "| AwoooP | new | 1,200 | 9.5 |",
    ]


def test_a_table_row_may_be_its_cells_and_a_header_cell_may_be_empty():
    lines = report.table(" | value", [("commits", 42)])

    assert lines == ["| | value |", "|---|---:|", "| commits | 42 |"]


def test_a_block_between_markers_is_replaced_and_the_text_around_it_kept():
    before = "intro\n<!-- b -->\nold\n<!-- e -->\nafter\n"

    after = report.place_between(
        before, "<!-- b -->\nnew\n<!-- e -->\n", "<!-- b -->", "<!-- e -->"
    )

    assert after == "intro\n<!-- b -->\nnew\n<!-- e -->\nafter\n"


def test_a_first_block_goes_below_the_line_it_must_follow():
    after = report.place_between(
        "intro\n", "<!-- b -->\nnew\n<!-- e -->", "<!-- b -->", "<!-- e -->", after="MARK"
    )

    assert after == "intro\n\nMARK\n\n<!-- b -->\nnew\n<!-- e -->\n"
