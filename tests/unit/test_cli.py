"""The awooop command's input checks (no database needed: they fail before connecting)."""

from __future__ import annotations

import pytest

from awooop import cli


def run(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def test_invalid_project_id_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    code, err = run(capsys, "project", "create", "Bad Id!")
    assert code == 2
    assert "invalid project id 'Bad Id!'" in err


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ("telegram", "must look like <channel>=<workflow>"),
        ("fax=demo-api", "unknown channel 'fax'"),
        ("api=no-such-workflow", "unknown workflow 'no-such-workflow'"),
    ],
)
def test_bad_routes_are_refused_before_touching_the_database(capsys, monkeypatch, route, message):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    code, err = run(capsys, "project", "routes", "demo", route)
    assert code == 2
    assert message in err


def test_missing_configuration_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.delenv("AWOOOP_DATABASE_URL", raising=False)
    code, err = run(capsys, "project", "routes", "demo", "api=noop-3")
    assert code == 2
    assert "AWOOOP_DATABASE_URL is not set" in err


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("project", "migrate", "workflows", "dev"):
        assert command in out


def test_dev_key_prints_a_usable_secret_key(capsys):
    from awooop.secrets import SecretBox

    assert cli.main(["dev", "key"]) == 0
    key = capsys.readouterr().out.strip()
    assert SecretBox(key).decrypt(SecretBox(key).encrypt("x")) == "x"


def test_metrics_reset_deletes_only_metric_files(capsys, tmp_path):
    (tmp_path / "counter_123.db").write_bytes(b"x")
    (tmp_path / "histogram_123.db").write_bytes(b"x")
    (tmp_path / "keep.txt").write_text("not a metric file")

    code = cli.main(["metrics", "reset", "--dir", str(tmp_path)])

    assert code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
    assert "removed 2 metric file(s)" in capsys.readouterr().out


def test_metrics_reset_without_a_directory_is_refused(capsys, monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)

    code, err = run(capsys, "metrics", "reset")

    assert code == 2
    assert "PROMETHEUS_MULTIPROC_DIR is not set" in err


def test_dev_up_prints_the_service_urls_without_their_passwords(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", "postgresql+psycopg2://u:db-secret@127.0.0.1:1/d")
    monkeypatch.setenv("AWOOOP_BROKER_URL", "redis://:broker-secret@127.0.0.1:1/0")

    assert cli.main(["dev", "--state-dir", str(tmp_path), "up"]) == 0

    out = capsys.readouterr().out
    assert "AWOOOP_DATABASE_URL=postgresql+psycopg2://u:***@127.0.0.1:1/d  (configured)" in out
    assert "AWOOOP_BROKER_URL=redis://:***@127.0.0.1:1/0  (configured)" in out
    assert "secret" not in out
