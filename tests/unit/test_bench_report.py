"""What the benches share in bench.report: knobs, how a bench was started, the markdown tables
and the blocks between markers."""

from __future__ import annotations

import dataclasses

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


def test_a_bench_started_by_make_names_its_target_and_a_quick_one_its_knob(monkeypatch):
    monkeypatch.delenv("MAKELEVEL", raising=False)
    monkeypatch.delenv("BENCH_GROWTH_QUICK", raising=False)
    assert report.command("bench-growth", "bench.growth", "BENCH_GROWTH_QUICK") == (
        "python -m bench.growth"
    )

    monkeypatch.setenv("BENCH_GROWTH_QUICK", "1")
    monkeypatch.setenv("MAKELEVEL", "1")

    assert report.command("bench-growth", "bench.growth", "BENCH_GROWTH_QUICK") == (
        "BENCH_GROWTH_QUICK=1 make bench-growth"
    )
    assert report.command("bench-capacity", "bench.capacity") == "make bench-capacity"


def test_the_first_sentence_names_the_module_only_when_the_command_does_not():
    keys = ("date", "code", "postgresql", "redis", "python", "cpus", "cpu_model", "memory")
    machine = {k: "x" for k in (*keys, "load_before")}

    by_make = report.written_by("make bench-growth", "bench.growth", machine)
    by_module = report.written_by("python -m bench.growth", "bench.growth", machine)

    assert by_make.startswith("Written by `make bench-growth` (`python -m bench.growth`) on x")
    assert by_module.startswith("Written by `python -m bench.growth` on x")


def test_a_knob_reads_its_quick_default_only_when_the_quick_knob_is_set(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Knobs:
        runs: int = report.knob(report.env_int, "BENCH_X_RUNS", 1000, "BENCH_X_QUICK", 20)

    monkeypatch.delenv("BENCH_X_RUNS", raising=False)
    monkeypatch.delenv("BENCH_X_QUICK", raising=False)
    assert Knobs().runs == 1000

    monkeypatch.setenv("BENCH_X_QUICK", "1")
    assert Knobs().runs == 20

    monkeypatch.setenv("BENCH_X_RUNS", "300")
    assert Knobs().runs == 300
