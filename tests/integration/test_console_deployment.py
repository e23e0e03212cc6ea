"""The ops console's workers page and an admin token's cross-project view, through Flask's
test client against a real PostgreSQL: what each shows, and that nobody sees another
project than the ones its token is an admin token of."""

from __future__ import annotations

import io
import json
import re
import uuid

import pytest

from awooop import cli, secrets
from awooop.store import projects as store_projects
from awooop.store import workers as store_workers
from tests.support import db, tokens
from tests.support import overview as seed
from tests.support.console import hidden_fields, login, text


def worker_row(page: str, worker_id: str) -> str:
    (row,) = re.findall(
        rf"<tr>\s*<td class=\"mono\">{re.escape(worker_id)}</td>.*?</tr>", page, re.S
    )
    return row


def test_the_workers_page_shows_host_pid_last_beat_and_this_projects_runs_held(
    client, engine, settings, project
):
    other = cli.create_project(settings, f"o{uuid.uuid4().hex[:8]}")
    with engine.connect() as conn:
        store_workers.beat(conn, "w-console-1", host="host-a", pid=4242)
        store_workers.beat(conn, "w-console-2", host="host-b", pid=77)
    for run_id, _ in seed.runs(engine, project["project_id"], "RUNNING", 2):
        db.set_run(engine, run_id, worker_id="w-console-1")
    for run_id, _ in seed.runs(engine, other["project_id"], "RUNNING", 3):
        db.set_run(engine, run_id, worker_id="w-console-1")
    db.execute(
        engine,
        "UPDATE awooop_worker SET seen_at = now() - interval '5 minutes',"
        " judged_dead_at = now() WHERE worker_id = 'w-console-2'",
    )
    login(client, project["project_id"], tokens.add(engine, project["project_id"], "viewer"))

    page = text(client.get("/console/workers"))

    first, second = worker_row(page, "w-console-1"), worker_row(page, "w-console-2")
    assert "<td>host-a</td>" in first and '<td class="mono">4242</td>' in first
    assert '<td class="runs-held">2</td>' in first  # not the other project's 3
    assert "ago)" in first and "DEAD" not in first
    assert "<td>host-b</td>" in second and '<td class="runs-held">0</td>' in second
    assert "(5 min ago)" in second and "DEAD" in second


# --- An admin token's projects --------------------------------------------------------------


def admin_in(engine, token: str, *project_ids: str) -> None:
    with engine.connect() as conn:
        for project_id in project_ids:
            store_projects.add_api_token(conn, project_id, "admin", secrets.sha256_hex(token))


@pytest.fixture
def three_projects(engine, settings, project) -> list[str]:
    """The test project and two more, each with runs of known statuses."""
    ids = [project["project_id"]]
    ids += [cli.create_project(settings, f"o{uuid.uuid4().hex[:8]}")["project_id"] for _ in "ab"]
    seed.runs(engine, ids[0], "PENDING", 2)
    seed.runs(engine, ids[1], "FAILED", 3, finished_ago=5)
    seed.runs(engine, ids[2], "RUNNING", 1)
    return ids


def count_cell(page: str, project_id: str, status: str) -> str:
    row = re.search(rf'<tr data-project="{project_id}">.*?</tr>', page, re.S)
    assert row is not None, f"{project_id} is not listed"
    (n,) = re.findall(rf'data-status="{status}">([0-9,+]+)</button>', row.group(0))
    return n


def test_an_admin_token_sees_the_projects_it_administers_with_runs_by_status(
    client, engine, three_projects
):
    mine, second, theirs = three_projects
    token = secrets.new_token()
    admin_in(engine, token, mine, second)
    login(client, mine, token)

    page = text(client.get("/console/projects"))

    assert (count_cell(page, mine, "PENDING"), count_cell(page, mine, "FAILED")) == ("2", "0")
    assert (count_cell(page, second, "FAILED"), count_cell(page, second, "PENDING")) == ("3", "0")
    assert f'data-project="{theirs}"' not in page
    assert 'href="/console/projects"' in page  # in the navigation, for an admin


def test_a_count_at_the_cap_reads_as_the_overview_writes_it(
    client, engine, three_projects, monkeypatch
):
    from awooop.web.console import projects as console_projects

    mine = three_projects[0]
    monkeypatch.setattr(console_projects, "COUNT_CAP", 1_000)
    seed.runs(engine, mine, "PENDING", 998)
    token = secrets.new_token()
    admin_in(engine, token, mine)
    login(client, mine, token)

    page = text(client.get("/console/projects"))

    assert "counts stop at 1,000" in page
    assert count_cell(page, mine, "PENDING") == "1,000+"


def test_an_admin_enters_another_of_its_projects_and_sees_its_runs(client, engine, three_projects):
    mine, second, _ = three_projects
    token = secrets.new_token()
    admin_in(engine, token, mine, second)
    login(client, mine, token)
    page = text(client.get("/console/projects"))
    action = f'action="/console/projects/{second}/enter"'
    form = hidden_fields(page[page.index(action) :].split("</form>")[0])

    response = client.post(
        f"/console/projects/{second}/enter", data={**form, "next": "/console/runs?status=FAILED"}
    )

    assert (response.status_code, response.headers["Location"]) == (
        303,
        "/console/runs?status=FAILED",
    )
    runs = text(client.get("/console/runs", query_string={"status": "FAILED"}))
    assert f"project <strong>{second}</strong>" in runs
    failed = [
        r["run_id"]
        for r in db.rows(
            engine, "SELECT run_id FROM awooop_run_state WHERE project_id = :p", p=second
        )
    ]
    assert all(str(r)[:8] in runs for r in failed)


def test_entering_a_project_the_token_does_not_administer_is_a_404(client, engine, three_projects):
    mine, _, theirs = three_projects
    token = secrets.new_token()
    admin_in(engine, token, mine)
    login(client, mine, token)
    form = hidden_fields(text(client.get("/console/projects")))

    responses = [
        client.post(f"/console/projects/{target}/enter", data=form)
        for target in (theirs, "no-such-project")
    ]

    assert [r.status_code for r in responses] == [404, 404]
    assert f"project <strong>{mine}</strong>" in text(client.get("/console/runs"))


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_a_non_admin_never_sees_other_projects(client, engine, three_projects, role):
    mine, second, _ = three_projects
    token = secrets.new_token()
    with engine.connect() as conn:  # the same token, with this role, in two projects
        for project_id in (mine, second):
            store_projects.add_api_token(conn, project_id, role, secrets.sha256_hex(token))
    login(client, mine, token)
    home = text(client.get("/console/runs"))

    listing = client.get("/console/projects")
    enter = client.post(f"/console/projects/{second}/enter", data=hidden_fields(home))

    assert 'href="/console/projects"' not in home
    assert (listing.status_code, enter.status_code) == (403, 403)
    assert second not in text(listing) and second not in text(enter)
    assert f"project <strong>{mine}</strong>" in text(client.get("/console/runs"))


def test_entering_a_project_needs_the_csrf_token(client, engine, three_projects):
    mine, second, _ = three_projects
    token = secrets.new_token()
    admin_in(engine, token, mine, second)
    login(client, mine, token)

    response = client.post(f"/console/projects/{second}/enter", data={"next": "/console/"})

    assert response.status_code == 400
    assert f"project <strong>{mine}</strong>" in text(client.get("/console/runs"))


def test_revoking_the_token_in_the_entered_project_ends_the_session_there(
    client, engine, settings, three_projects
):
    mine, second, _ = three_projects
    token = secrets.new_token()
    admin_in(engine, token, mine, second)
    login(client, mine, token)
    form = hidden_fields(text(client.get("/console/projects")))
    client.post(f"/console/projects/{second}/enter", data=form)
    db.execute(
        engine,
        "UPDATE awooop_credential SET revoked_at = now() WHERE project_id = :p AND role = 'admin'",
        p=second,
    )

    assert client.get("/console/runs").status_code == 303


def run_cli(monkeypatch, capsys, settings, stdin: str, *argv: str):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("AWOOOP_SECRET_KEY", settings.secret_key)
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = cli.main(list(argv))
    return code, capsys.readouterr()


def test_project_token_stdin_registers_a_token_already_held_without_echoing_it(
    monkeypatch, capsys, engine, settings, three_projects
):
    mine, second, _ = three_projects
    token = tokens.add(engine, mine, "admin")

    code, out = run_cli(
        monkeypatch,
        capsys,
        settings,
        token + "\n",
        "project",
        "token",
        second,
        "--role",
        "admin",
        "--stdin",
    )

    assert code == 0, out.err
    assert token not in out.out
    assert json.loads(out.out) == {"project_id": second, "role": "admin"}
    (mine_id,) = db.rows(
        engine,
        "SELECT credential_id::text AS id FROM awooop_credential WHERE project_id = :p"
        " AND role = 'admin'",
        p=mine,
    )
    with engine.connect() as conn:
        shared = store_projects.admin_projects(conn, mine_id["id"])
    assert [p["project_id"] for p in shared] == sorted([mine, second])


def test_project_token_stdin_refuses_a_short_token_and_stores_nothing(
    monkeypatch, capsys, engine, settings, project
):
    before = db.count(engine, "awooop_credential")

    code, out = run_cli(
        monkeypatch,
        capsys,
        settings,
        "short\n",
        "project",
        "token",
        project["project_id"],
        "--role",
        "admin",
        "--stdin",
    )

    assert code != 0
    assert "at least 32 printable ASCII characters" in out.err
    assert db.count(engine, "awooop_credential") == before
