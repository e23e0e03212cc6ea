"""``make bench``'s commit counting (bench.database) and its verdicts (bench.run): the
arithmetic only; the counters themselves are read from a real PostgreSQL by the bench."""

from __future__ import annotations

import math
import os

import pytest

from bench import database, procs, report, run


def reading(xact: int, liveness: int = 0, auth: int = 0, harness: int = 0) -> database.Reading:
    return database.Reading(xact_commit=xact, liveness=liveness, auth_loads=auth, harness=harness)


def test_the_background_counted_where_it_happens_is_subtracted_from_the_database_delta():
    before = reading(1000, liveness=3, auth=10, harness=4)
    after = reading(3068, liveness=4, auth=16, harness=6)

    count = database.Count.between(before, after)

    assert (count.total, count.liveness, count.auth_loads, count.harness) == (2068, 1, 6, 2)
    assert count.background == 9
    assert count.runs == 2059


def test_five_commits_per_run_reads_5_000_and_meets_the_target():
    count = database.Count.between(reading(0), reading(2009, liveness=2, auth=5, harness=2))

    per_run = count.per_run(400)

    assert f"{per_run:.3f}" == "5.000"
    assert report.verdict(per_run, run.TARGETS["commits_per_run"], False) == "met"


def test_one_commit_more_than_five_per_run_is_missed_even_when_it_rounds_to_5_000():
    count = database.Count.between(reading(0), reading(12_001))

    per_run = count.per_run(2_400)

    assert f"{per_run:.3f}" == "5.000"
    assert report.verdict(per_run, run.TARGETS["commits_per_run"], False) == "MISSED"


def test_an_idle_window_whose_commits_are_all_background_leaves_nothing():
    idle = database.Count.between(reading(50, harness=1), reading(52, harness=2, liveness=1))

    assert idle.runs == 0


def test_no_runs_gives_no_figure_rather_than_a_division_by_zero():
    assert math.isnan(database.Count.between(reading(0), reading(5)).per_run(0))


def test_the_background_line_names_each_part():
    text = database.Count(total=20, liveness=1, auth_loads=6, harness=2).background_text()

    assert text == (
        "9 background commits subtracted: 1 worker liveness upserts, 6 project-auth loads, "
        "2 the harness's own, 0 from 0 autovacuum visits"
    )


def test_a_database_with_fsync_or_synchronous_commit_off_fails_the_summary():
    assert run.durability_failures({"fsync": "on", "synchronous_commit": "on"}) == []
    assert run.durability_failures({"fsync": "on", "synchronous_commit": "local"}) == []

    [line] = run.durability_failures({"fsync": "off", "synchronous_commit": "off"})

    assert "fsync=off, synchronous_commit=off" in line


def test_the_summary_lists_the_durability_failure_before_the_commits_one():
    e2e = {"target_failures": ["PostgreSQL commits per run 5.147 > 5"]}

    failures = run.target_failures({"fsync": "off", "synchronous_commit": "on"}, e2e)

    assert len(failures) == 2
    assert failures[0].startswith("PostgreSQL is not durable (fsync=off)")
    assert failures[1] == "PostgreSQL commits per run 5.147 > 5"


def test_sessions_the_bench_processes_started_are_counted_apart_from_the_harnesss():
    before = database.Reading(0, 0, 0, 0, sessions=10, harness_sessions=3)
    after = database.Reading(5_000, 0, 0, 0, sessions=16, harness_sessions=7)

    # 6 sessions started on the database, 4 of them the harness's own.
    assert database.Count.between(before, after).sessions == 2


def test_an_autovacuum_visit_told_by_its_three_scans_of_pg_class_is_subtracted():
    before = database.Reading(1000, 3, 0, 0, catalog_scans=7)
    after = database.Reading(1000 + 15_000 + 2 + 1, 4, 0, 0, catalog_scans=10)

    count = database.Count.between(before, after)

    assert (count.autovacuum_visits, count.autovacuum) == (1, 2)
    assert count.runs == 15_000
    assert count.background_text().endswith(", 2 from 1 autovacuum visits")


def test_scans_of_pg_class_that_are_not_whole_visits_are_not_explained_and_nothing_is_subtracted():
    count = database.Count.between(
        database.Reading(0, 0, 0, 0, catalog_scans=0),
        database.Reading(15_002, 0, 0, 0, catalog_scans=4),
    )

    assert (count.autovacuum_visits, count.autovacuum) == (0, 0)
    assert count.runs == 15_002
    assert "4 sequential scans of pg_class are not a whole number" in count.background_text()
    assert report.verdict(count.per_run(3_000), run.TARGETS["commits_per_run"], False) == "MISSED"


def test_commits_are_counted_over_the_soak_and_more_than_five_per_run_is_a_fail_line():
    info = {"soak_runs": 400}
    whole = database.Count.between(reading(0), reading(9_000))
    soak = (reading(0), reading(2_103, liveness=2, auth=1))

    run.count_commits(info, whole, soak, admitted=1_200, started=[])

    assert (info["commits_runs"], info["commits_per_run"]) == (2_100, 5.25)
    assert info["commits_whole_window"] == {"total": 9_000, "runs": 1_600}
    [line] = info["target_failures"]
    assert line.startswith("PostgreSQL commits per run 5.250 > 5: 2100 commits for 400 runs")


def test_a_session_started_during_the_soak_is_a_fail_line_that_names_it():
    info = {"soak_runs": 400}
    whole = database.Count.between(reading(0), reading(9_000))
    soak = (database.Reading(0, 0, 0, 0), database.Reading(2_000, 0, 0, 0, sessions=1))

    run.count_commits(info, whole, soak, admitted=1_200, started=["awooop-keeper at 10:45:31"])

    [line] = info["target_failures"]
    assert line == (
        "commit counting: 1 sessions started while the soak was counted (awooop-keeper at "
        "10:45:31); their set-up commits are in the figure, which is not exact"
    )
    assert info["commits_sessions_seen"] == ["awooop-keeper at 10:45:31"]


def test_the_session_watch_names_the_child_sessions_that_started_inside_a_window():
    watch = database.SessionWatch(meter=None)  # not started: its notes are set by hand
    watch.children = {
        (1, "a"): (100.0, "awooop-web"),
        (2, "b"): (205.0, "awooop-keeper"),
        (3, "c"): (150.0, "awooop-worker"),
    }

    started = watch.children_started(140.0, 210.0)

    assert [name.split(" at ")[0] for name in started] == ["awooop-worker", "awooop-keeper"]


def test_the_page_of_an_admission_only_run_keeps_its_header_and_reads_n_a_for_the_rest():
    keys = ("date", "cpus", "cpu_model", "memory", "kernel", "python", "postgresql", "redis")
    machine = {k: "x" for k in (*keys, "load_before", "code")}

    page = run.render_markdown(machine, run.Knobs(), [], {}, {}, run.ratios([], {}, {}, ()), [])

    assert page.startswith("# Benchmarks\n\nWhat AwoooP costs")
    assert page.endswith(f"\n\n{report.MARKER}\n")
    assert "| committed in the bench's database | n/a |" in page
    assert "\n\n\n" not in page


@pytest.mark.parametrize(
    ("owner", "foreign", "children"),
    [
        (None, {(7, "t"): "psql"}, {}),  # nobody of the bench holds the socket
        (os.getpid(), {}, {}),  # the harness's own session: the bench's, not a child's
        (os.getpid() + 1, {}, {(7, "t"): (123.0, "psql")}),  # a process the bench started
    ],
)
def test_the_session_watch_tells_foreign_the_harness_and_children_apart(
    monkeypatch, owner, foreign, children
):
    monkeypatch.setattr(procs, "tcp_inode", lambda local, remote: "42")
    monkeypatch.setattr(procs, "socket_owner", lambda pids, inode: owner)
    watch = database.SessionWatch(meter=None)  # not started: note() is called by hand

    watch.note((7, "t"), 123.0, "psql", client_port=50_000, port=5432)

    assert (watch.foreign, watch.children) == (foreign, children)
    assert ((7, "t") in watch.mine) is (owner is not None)
