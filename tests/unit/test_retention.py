"""The per-project retention's input check (`awooop project retention`)."""

from __future__ import annotations

import pytest

from awooop import cli
from awooop.domain.retention import MAX_RETENTION_DAYS, InvalidRetention, parse_retention_days


@pytest.mark.parametrize(
    ("value", "days"),
    [("90", 90), (" 7 ", 7), (1, 1), (30.0, 30), (str(MAX_RETENTION_DAYS), MAX_RETENTION_DAYS)],
)
def test_whole_days_in_range_are_accepted(value, days):
    assert parse_retention_days(value) == days


@pytest.mark.parametrize("value", [None, "", "default", "DEFAULT", "none"])
def test_default_clears_the_override(value):
    assert parse_retention_days(value) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "between 1 and 3650 days, not 0"),
        ("-5", "between 1 and 3650 days, not -5"),
        ("3651", "between 1 and 3650 days, not 3651"),
        ("1.5", "whole number of days or 'default', not '1.5'"),
        (1.5, "whole number of days, not 1.5"),
        ("forever", "whole number of days or 'default', not 'forever'"),
        (True, "whole number of days, not True"),
        # int() alone would read these as 5, 1000 and 5
        ("\u0665", "whole number of days or 'default', not '\u0665'"),
        ("1_000", "whole number of days or 'default', not '1_000'"),
        ("+5", "whole number of days or 'default', not '\\+5'"),
    ],
)
def test_anything_else_is_refused_with_what_to_give(value, message):
    with pytest.raises(InvalidRetention, match=message.replace(".", r"\.")):
        parse_retention_days(value)


def test_the_cli_refuses_a_bad_retention_before_touching_the_database(capsys, monkeypatch):
    monkeypatch.setenv("AWOOOP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")

    code = cli.main(["project", "retention", "ops", "0"])

    assert code == 2
    assert "retention must be between 1 and 3650 days, not 0" in capsys.readouterr().err
