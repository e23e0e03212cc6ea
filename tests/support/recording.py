"""The API client and the `awooop` commands over a recording transport: canned answers in,
the requests they sent kept (the live web is in tests/e2e/test_client_processes.py)."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
import requests

from awooop import cli, client

BASE = "http://awooop.test"
RUN_ID = "6f1c5b4e-2a55-4b0e-9a43-0b7f3c1d2e10"


class Recorder(requests.adapters.BaseAdapter):
    """Answers each request with the next canned (status, body) and keeps what was sent."""

    def __init__(self, *answers: tuple[int, Any]) -> None:
        super().__init__()
        self.answers = list(answers)
        self.sent: list[requests.PreparedRequest] = []

    def send(self, request, **kwargs):  # type: ignore[no-untyped-def]
        self.sent.append(request)
        status, body = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        response = requests.Response()
        response.status_code = status
        response.url = request.url
        response.request = request
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        response._content = raw
        response.headers["Content-Type"] = "application/json"
        return response

    def close(self) -> None:
        pass

    def body(self, index: int = -1) -> Any:
        return json.loads(self.sent[index].body)


def session_over(recorder: Recorder) -> requests.Session:
    session = requests.Session()
    session.mount(BASE, recorder)
    return session


def api(*answers: tuple[int, Any]) -> tuple[client.Client, Recorder]:
    """A client of project ops at BASE over a recorder with these answers."""
    recorder = Recorder(*answers)
    return client.Client(BASE + "/", "tok", "ops", session=session_over(recorder)), recorder


def commands_over(monkeypatch: pytest.MonkeyPatch, *answers: tuple[int, Any]) -> Recorder:
    """The `awooop` commands' client over a recorder with these answers, at BASE, with an
    API token in the environment."""
    recorder = Recorder(*answers)
    session = session_over(recorder)
    monkeypatch.setattr(client, "Client", functools.partial(client.Client, session=session))
    monkeypatch.setenv("AWOOOP_API_URL", BASE)
    monkeypatch.setenv("AWOOOP_API_TOKEN", "tok")
    return recorder


def awooop(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `awooop ARGV`: exit status, stdout, stderr."""
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_body(status: str = "RUNNING", **extra: Any) -> dict[str, Any]:
    """A run as GET …/runs/{id} answers it (RUNNING at step diagnose, unless changed)."""
    return {
        "run_id": RUN_ID,
        "status": status,
        "saga_status": "RUNNING" if status == "RUNNING" else status,
        "workflow_name": "alert-triage",
        "workflow_version": 2,
        "current_step": "diagnose",
        "output": None,
        "failure_code": None,
        "failure_reason": None,
        "version": 3,
        "created_at": "2026-11-29T10:00:00+00:00",
        "finished_at": None,
        "attempt_count": 1,
        **extra,
    }
