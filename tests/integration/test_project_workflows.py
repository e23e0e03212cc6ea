"""`awooop project workflows`: the workflows a project's clients may start by name, against a
real database, and what admission makes of the list."""

from __future__ import annotations

import json

from tests.support import commands, requests


def run(capsys, monkeypatch, settings, *argv: str):
    return commands.run(capsys, monkeypatch, settings, "project", "workflows", *argv)


def listed(out: str) -> list[str]:
    return json.loads(out)["allowed_workflows"]


def test_allowing_adds_names_once_and_sorted(capsys, monkeypatch, settings, project):
    pid = project["project_id"]

    run(capsys, monkeypatch, settings, pid, "--allow", "noop-3")
    code, out, _ = run(capsys, monkeypatch, settings, pid, "--allow", "chatops", "noop-3")

    assert code == 0
    assert json.loads(out) == {"project_id": pid, "allowed_workflows": ["chatops", "noop-3"]}


def test_disallowing_takes_names_off_and_the_list_is_printed_without_flags(
    capsys, monkeypatch, settings, project
):
    pid = project["project_id"]
    run(capsys, monkeypatch, settings, pid, "--allow", "chatops", "noop-3", "alert-triage")

    code, _, _ = run(capsys, monkeypatch, settings, pid, "--disallow", "noop-3", "gone-workflow")
    _, out, _ = run(capsys, monkeypatch, settings, pid)

    assert code == 0
    assert listed(out) == ["alert-triage", "chatops"]


def test_allowing_a_name_no_registered_workflow_has_is_refused_and_changes_nothing(
    capsys, monkeypatch, settings, project
):
    pid = project["project_id"]

    code, _, err = run(capsys, monkeypatch, settings, pid, "--allow", "chatops", "chatopz")
    _, out, _ = run(capsys, monkeypatch, settings, pid)

    assert code == 2
    assert "no registered workflow is called 'chatopz'; registered: " in err
    assert listed(out) == []


def test_refusing_an_unknown_name_says_how_a_workflow_of_ones_own_is_registered(
    capsys, monkeypatch, settings, project
):
    # Given a reader who saved a workflow module but did not name it for the command
    monkeypatch.delenv("AWOOOP_WORKFLOW_MODULES", raising=False)

    code, _, err = run(capsys, monkeypatch, settings, project["project_id"], "--allow", "mine")

    assert code == 2
    assert err.count("\n") == 1, err
    assert (
        "a workflow of your own is registered when its module is named in "
        "AWOOOP_WORKFLOW_MODULES (not set here) and importable (PYTHONPATH)" in err
    )


def test_allowing_and_disallowing_one_name_at_once_is_refused(
    capsys, monkeypatch, settings, project
):
    code, _, err = run(
        capsys, monkeypatch, settings, project["project_id"], "--allow", "a", "--disallow", "a"
    )

    assert code == 2
    assert "both allowed and disallowed: a" in err


def test_an_unknown_project_is_refused(capsys, monkeypatch, settings, engine):
    code, _, err = run(capsys, monkeypatch, settings, "nope", "--allow", "chatops")

    assert code == 2
    assert "no project 'nope'" in err


def test_a_workflow_allowed_on_the_command_line_can_be_started(
    capsys, monkeypatch, settings, project, client
):
    run(capsys, monkeypatch, settings, project["project_id"], "--allow", "chatops")

    path, headers, raw = requests.api(project, "k", {"workflow": "chatops"})
    response = client.post(path, headers=headers, data=raw)

    assert response.status_code == 202, response.json
