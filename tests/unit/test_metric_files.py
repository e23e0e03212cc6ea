"""The multiprocess metrics directory: users share it, an owner has it alone and empties it,
``awooop metrics reset`` refuses while it is used.

A ``flock`` taken through two separate ``open()`` calls conflicts within one process as it
does between two, so one test process can play both sides; each test has its own directory.
"""

from __future__ import annotations

import os

import pytest

from awooop import cli, metric_files


def metric_file(directory, kind: str, pid: int):
    path = directory / f"{kind}_{pid}.db"
    path.write_bytes(b"")
    return path


def test_an_owner_deletes_other_processes_files_and_keeps_its_own(tmp_path):
    mine = metric_file(tmp_path, "counter", os.getpid())
    earlier = [metric_file(tmp_path, "counter", 1), metric_file(tmp_path, "histogram", 2)]
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("not a metric file")

    removed = metric_files.own(tmp_path)

    assert removed == 2
    assert mine.exists() and unrelated.exists()
    assert not any(path.exists() for path in earlier)


def test_a_directory_in_use_cannot_be_owned(tmp_path):
    metric_files.use(tmp_path)  # e.g. a web server sharing it

    with pytest.raises(metric_files.DirectoryInUse, match="needs a directory of its own"):
        metric_files.own(tmp_path)


def test_an_owned_directory_cannot_be_used_by_another_process(tmp_path):
    metric_files.own(tmp_path)

    with pytest.raises(metric_files.DirectoryInUse, match="give this process another directory"):
        metric_files.use(tmp_path)


def test_users_share_a_directory(tmp_path):
    metric_files.use(tmp_path)
    metric_files.use(tmp_path)  # a second web server or worker on the same host


def test_reset_empties_a_directory_nobody_uses(tmp_path):
    files = [metric_file(tmp_path, "counter", 11), metric_file(tmp_path, "gauge_all", 12)]

    assert metric_files.reset(tmp_path) == 2
    assert not any(path.exists() for path in files)


def test_reset_refuses_while_a_process_uses_the_directory(tmp_path, capsys):
    kept = metric_file(tmp_path, "counter", 21)
    metric_files.use(tmp_path)

    code = cli.main(["metrics", "reset", "--dir", str(tmp_path)])

    assert code == 2
    assert "in use by running processes; stop them" in capsys.readouterr().err
    assert kept.exists()
