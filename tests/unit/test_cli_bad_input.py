"""Bad input to the `awooop` command: refused on one line with exit status 2 before anything is
sent or written, never a traceback; an API refusal of the user's own input is exit 2 too, its
refusal of the operation exit 1 (over a recording transport; no web, no database)."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from awooop.cli import runs
from tests.support.recording import RUN_ID, awooop, commands_over, run_body

UNREACHABLE_DATABASE = "postgresql://nobody@127.0.0.1:1/none"


@pytest.fixture
def wire(monkeypatch):
    return functools.partial(commands_over, monkeypatch)


def one_line(err: str) -> str:
    """The error line, checked to be the only line on stderr."""
    assert err.count("\n") == 1 and err.startswith("awooop: error: "), err
    return err


# --- arguments that are not text -------------------------------------------------------------


def test_an_argument_that_is_not_utf8_is_refused_before_anything_runs(wire, capsys):
    sent = wire((200, run_body()))

    code, out, err = awooop(capsys, "runs", "get", "ops", "\udcff")  # b"\xff" on the command line

    assert (code, out) == (2, "")
    assert one_line(err) == "awooop: error: arguments must be UTF-8 text (argument 4 is not)\n"
    assert sent.sent == []


def test_a_non_utf8_argument_from_the_shell_is_one_line_not_a_traceback(monkeypatch):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", UNREACHABLE_DATABASE)
    argv = [sys.executable, "-m", "awooop.cli", "project", "create", "qa6", "--name", b"\xff"]

    done = subprocess.run(argv, capture_output=True, timeout=60, check=False)  # noqa: S603

    assert done.returncode == 2, done.stderr
    assert done.stderr == b"awooop: error: arguments must be UTF-8 text (argument 5 is not)\n"


def test_a_unicode_error_in_a_command_is_one_line(monkeypatch, wire, capsys):
    def broken(args):
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    monkeypatch.setattr(runs, "cmd_get", broken)

    code, _, err = awooop(capsys, "runs", "get", "ops", RUN_ID)

    assert code == 2
    assert one_line(err) == (
        "awooop: error: not valid text: 'utf-8' codec can't decode byte 0xff in position 0: "
        "invalid start byte\n"
    )
