"""docs/configuration.md is what the settings generate (``make docs``): every setting with
its description, type, default and checks, from their definitions in awooop/config.py and
awooop/config_checks.py."""

from __future__ import annotations

import difflib
from dataclasses import fields
from pathlib import Path

import pytest

from awooop import cli, config_checks, config_doc
from awooop.config import Settings, variable

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_committed_page_is_what_the_settings_generate():
    committed, generated = PAGE.read_text(), config_doc.render()

    diff = difflib.unified_diff(
        committed.splitlines(), generated.splitlines(), "committed", "generated", lineterm=""
    )
    assert committed == generated, (
        f"docs/configuration.md differs from what awooop/config.py generates: run "
        f"`{config_doc.REGENERATE}`\n" + "\n".join(list(diff)[:40])
    )


def test_every_setting_has_one_row_with_its_description_and_default():
    page = config_doc.render()

    for f in fields(Settings):
        rows = [line for line in page.splitlines() if line.startswith(f"| `{variable(f.name)}` |")]
        assert len(rows) == 1, f.name
        _, _, default, described, _ = (cell.strip() for cell in rows[0].strip("|").split(" | "))
        assert described == f.metadata["doc"] and described.endswith("."), f.name
        if isinstance(f.default, float) and not isinstance(f.default, bool):
            assert default.split(" (")[0] == f"{f.default:g}", f.name


def test_the_checks_column_says_what_each_setting_is_checked_against():
    page = config_doc.render()

    assert "| a port, 1–65535 |" in page  # AWOOOP_PORT
    heartbeat = next(
        line for line in page.splitlines() if "`AWOOOP_HEARTBEAT_INTERVAL" in line[:40]
    )
    assert heartbeat.endswith(
        "| a number > 0; `AWOOOP_HEARTBEAT_INTERVAL_SECONDS` ≤ `AWOOOP_LEASE_TTL_SECONDS` / 3: "
        "a lease survives two failed renewals |"
    )
    for scheme in config_checks.BROKER_SCHEMES + config_checks.DATABASE_DRIVERS:
        assert f"`{scheme}://`" in page


def test_a_setting_left_out_of_the_pages_sections_is_refused(monkeypatch):
    title, intro, names = config_doc.GROUPS[0]
    monkeypatch.setattr(config_doc, "GROUPS", ((title, intro, names[1:]), *config_doc.GROUPS[1:]))

    with pytest.raises(ValueError, match=rf"missing \['{names[0]}'\]"):
        config_doc.render()


@pytest.mark.parametrize("relation", config_checks.RELATIONS, ids=lambda r: r.rule[:40])
def test_each_relation_binds_settings_the_defaults_keep(relation):
    names = {f.name for f in fields(Settings)}

    assert set(relation.names) <= names
    assert relation.problem(Settings()) is None
    assert all(variable(name) in relation.rule for name in relation.names)


def test_awooop_config_markdown_prints_the_page_without_any_configuration(capsys, monkeypatch):
    for name in ("AWOOOP_DATABASE_URL", "AWOOOP_BROKER_URL", "AWOOOP_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWOOOP_STATE_DIR", "/nonexistent")  # no env file either

    assert cli.main(["config", "--markdown"]) == 0
    assert capsys.readouterr().out == config_doc.render()
