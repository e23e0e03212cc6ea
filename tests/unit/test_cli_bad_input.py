"""Bad input to the `awooop` command: refused on one line with exit status 2 before anything is
sent or written, never a traceback; an API refusal of the user's own input is exit 2 too, its
refusal of the operation exit 1 (over a recording transport; no web, no database)."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from awooop import cli
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


# --- awooop runs start: input, key, timeout --------------------------------------------------


@pytest.mark.parametrize("given", ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', "[1e999]"])
def test_runs_start_refuses_an_input_that_is_not_json(wire, capsys, given):
    sent = wire((202, {"run_id": RUN_ID, "status": "PENDING"}))

    code, _, err = awooop(capsys, "runs", "start", "ops", "wf", "--key", "k", "--input", given)

    assert code == 2
    assert "--input is not JSON" in one_line(err)
    assert sent.sent == []


@pytest.mark.parametrize(
    "key", ["a\nb", "", "k" * 256, "clé", "tab\there", " k", "k ", "ticket 4711", "k4,k5"]
)
def test_runs_start_refuses_a_key_the_api_would_refuse(wire, capsys, key):
    sent = wire((202, {"run_id": RUN_ID, "status": "PENDING"}))

    code, _, err = awooop(capsys, "runs", "start", "ops", "wf", "--key", key)

    assert code == 2
    assert "--key must be 1 to 255 visible ASCII characters, no space or comma" in one_line(err)
    assert sent.sent == []


def test_runs_start_sends_a_key_with_punctuation(wire, capsys):
    sent = wire((202, {"run_id": RUN_ID, "status": "PENDING"}))

    code, _, _ = awooop(capsys, "runs", "start", "ops", "wf", "--key", "ticket-4711/a:b", "--json")

    assert code == 0
    assert sent.sent[0].headers["Idempotency-Key"] == "ticket-4711/a:b"


@pytest.mark.parametrize("timeout", ["-1", "0", "nan", "inf"])
def test_runs_start_refuses_a_bad_timeout_before_starting_the_run(wire, capsys, timeout):
    sent = wire((202, {"run_id": RUN_ID, "status": "PENDING"}), (200, run_body("COMPLETED")))

    code, _, err = awooop(
        capsys, "runs", "start", "ops", "wf", "--key", "k", "--wait", "--timeout", timeout
    )

    assert code == 2
    assert "--timeout must be a number of seconds greater than 0" in one_line(err)
    assert sent.sent == []


@pytest.mark.parametrize("token", ["a\nb", "tokeń"])
def test_an_api_token_that_is_not_printable_ascii_is_refused(wire, capsys, token):
    sent = wire((200, run_body()))

    code, _, err = awooop(capsys, "runs", "get", "ops", RUN_ID, "--token", token)

    assert code == 2
    assert "the API token must be printable ASCII" in one_line(err)
    assert token not in err
    assert sent.sent == []


# int() and float() alone would read each of these as 5
@pytest.mark.parametrize("number", ["\u0665", "\uff15", "0_5"])
@pytest.mark.parametrize(
    ("command", "option"),
    [
        (("runs", "list", "ops"), "--limit"),
        (("runs", "start", "ops", "wf", "--key", "k"), "--version"),
        (("runs", "start", "ops", "wf", "--key", "k", "--wait"), "--timeout"),
        (("runs", "pause", "ops", RUN_ID, "--reason", "r"), "--if-version"),
        (("runs", "rerun", "ops", "--workflow", "wf", "--dry-run"), "--rate"),
        (("runs", "rerun", "ops", "--workflow", "wf", "--dry-run"), "--limit"),
    ],
)
def test_numbers_are_ascii_decimal(wire, capsys, command, option, number):
    sent = wire((202, {"run_id": RUN_ID, "status": "PENDING"}), (200, run_body("COMPLETED")))

    with pytest.raises(SystemExit) as exited:
        cli.main([*command, option, number])

    assert exited.value.code == 2
    assert f"error: argument {option}: {number!r} is not a" in capsys.readouterr().err
    assert sent.sent == []


# --- awooop runs rerun: rate and key ---------------------------------------------------------


@pytest.mark.parametrize("rate", ["inf", "nan", "-1", "0"])
def test_runs_rerun_refuses_a_rate_that_is_not_a_finite_number_in_range(wire, capsys, rate):
    sent = wire((200, {}))

    code, _, err = awooop(
        capsys, "runs", "rerun", "ops", "--workflow", "wf", "--dry-run", "--rate", rate
    )

    assert code == 2
    assert "--rate must be a finite number of at least 0.02" in one_line(err)
    assert sent.sent == []


def test_runs_rerun_refuses_a_key_the_api_would_refuse(wire, capsys):
    sent = wire((202, {}))

    code, _, err = awooop(capsys, "runs", "rerun", "ops", RUN_ID, "--key", "a\nb")

    assert code == 2
    assert "--key must be 1 to 255 visible ASCII characters, no space or comma" in one_line(err)
    assert sent.sent == []


# --- the API's answers -----------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 413, 415, 422])
def test_the_apis_refusal_of_the_input_exits_2(wire, capsys, status):
    wire((status, {"error": {"code": "E-REQUEST-001", "message": "status 'FOO' is not one of"}}))

    code, _, err = awooop(capsys, "runs", "list", "ops", "--status", "FOO")

    assert code == 2
    assert one_line(err) == (
        f"awooop: error: E-REQUEST-001 (HTTP {status}): status 'FOO' is not one of\n"
    )


@pytest.mark.parametrize("status", [401, 403, 404, 409, 412, 429, 500, 503])
def test_the_apis_refusal_of_the_operation_exits_1(wire, capsys, status):
    wire((status, {"error": {"code": "E-X", "message": "no"}}))

    code, _, err = awooop(capsys, "runs", "get", "ops", RUN_ID)

    assert code == 1
    assert one_line(err) == f"awooop: error: E-X (HTTP {status}): no\n"


def test_the_exit_statuses_are_in_the_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["runs", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())

    assert "2 bad usage or input, including input the API refused (HTTP 400, 413, 415 or 422)" in (
        help_text
    )


# --- awooop outbox ---------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["-1", "0", "1001", "99999999999999999999"])
def test_outbox_list_refuses_a_limit_out_of_range_before_the_database(capsys, monkeypatch, limit):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", UNREACHABLE_DATABASE)

    code, out, err = awooop(capsys, "outbox", "list", "--limit", limit)

    assert (code, out) == (2, "")
    assert one_line(err) == "awooop: error: --limit must be from 1 to 1000\n"


@pytest.mark.parametrize(
    ("action", "says"),
    [
        ("list", ["Lists the outbound messages", "default: 100", "1-1000"]),
        ("retry", ["Sends a PARKED message again"]),
    ],
)
def test_outbox_help_describes_the_action(capsys, action, says):
    with pytest.raises(SystemExit):
        cli.main(["outbox", action, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())

    for words in says:
        assert words in help_text


# --- awooop approvals decide -----------------------------------------------------------------


def test_approvals_decide_without_actor_leaves_it_to_the_api(wire, capsys):
    sent = wire((200, {"status": "approved", "run_id": RUN_ID}))

    code, out, _ = awooop(capsys, "approvals", "decide", "ops", "T" * 43, "approve")

    assert code == 0
    assert sent.body() == {"decision": "approve"}
    assert out == f"approved: run {RUN_ID} moves on\n"


def test_approvals_decide_help_says_the_actors_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["approvals", "decide", "--help"])
    help_text = " ".join(capsys.readouterr().out.split()).replace("api- token", "api-token")

    assert "[--actor NAME]" in help_text  # optional, as the default says
    assert "--actor NAME who decides, for the run's history (default: api-token:ROLE" in help_text


# --- awooop runs show ------------------------------------------------------------------------


def test_runs_show_says_last_held_by_for_a_run_whose_lease_is_gone(wire, capsys):
    finished = run_body(
        "COMPLETED", worker_id="w1:4242:ab12", lease_until=None,
        finished_at="2026-11-29T10:00:09+00:00",
    )  # fmt: skip
    wire((200, finished))

    code, out, _ = awooop(capsys, "runs", "show", "ops", RUN_ID)

    assert code == 0
    assert "  last held by w1:4242:ab12" in out.splitlines()
    assert "lease until" not in out


# --- awooop migrate ---------------------------------------------------------------------------


def test_a_downgrade_without_a_revision_is_refused_before_connecting(monkeypatch, capsys):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", UNREACHABLE_DATABASE)

    code = cli.main(["migrate", "--down"])

    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert one_line(err) == (
        "awooop: error: --down needs the revision to go back to, e.g. "
        "`awooop migrate --down 0013` (or `base`: every AwoooP table dropped)\n"
    )
