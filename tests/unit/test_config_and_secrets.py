"""Configuration parsing, credential material and log lines."""

from __future__ import annotations

import json
import logging

import pytest

from awooop import secrets
from awooop.config import ConfigError, Settings
from awooop.logs import JsonFormatter

BASE = {
    "AWOOOP_DATABASE_URL": "postgresql://x/y",
    "AWOOOP_BROKER_URL": "redis://x",
    "AWOOOP_SECRET_KEY": secrets.new_encryption_key(),
}


def test_defaults_are_the_adr_values():
    s = Settings.from_env(BASE)
    assert (s.lease_ttl_seconds, s.heartbeat_interval_seconds, s.reaper_interval_seconds) == (
        300,
        30,
        60,
    )
    assert s.max_body_bytes == 1024 * 1024


def test_numbers_are_parsed_and_bad_numbers_named():
    short = {
        "AWOOOP_LEASE_TTL_SECONDS": "2.5",
        "AWOOOP_HEARTBEAT_INTERVAL_SECONDS": "0.5",
        "AWOOOP_REAPER_INTERVAL_SECONDS": "1",
    }
    assert Settings.from_env({**BASE, **short}).lease_ttl_seconds == 2.5
    with pytest.raises(ConfigError, match="AWOOOP_PORT"):
        Settings.from_env({**BASE, "AWOOOP_PORT": "eighty"})


def test_missing_required_setting_says_which_and_how():
    """How for an installed package (export it) and in a checkout (make run)."""
    with pytest.raises(
        ConfigError, match=r"AWOOOP_BROKER_URL is not set\. Export it \(`awooop config`.*make run"
    ):
        Settings.from_env({k: v for k, v in BASE.items() if k != "AWOOOP_BROKER_URL"})


def test_tokens_are_43_url_safe_characters():
    token = secrets.new_token()
    assert len(token) == 43
    assert all(c.isalnum() or c in "-_" for c in token)


def test_a_token_never_starts_with_a_dash(monkeypatch):
    """``--token $TOKEN`` on the command line: argparse takes a value that starts with "-" for
    an option ("expected one argument"). One token in 64 from ``token_urlsafe`` starts so."""
    drawn = iter(["-dash-first", "-dash-again", "letter-first"])
    monkeypatch.setattr(secrets._stdlib_secrets, "token_urlsafe", lambda nbytes: next(drawn))

    assert secrets.new_token() == "letter-first"


def test_secret_box_round_trip_and_wrong_key():
    box = secrets.SecretBox(secrets.new_encryption_key())
    sealed = box.encrypt("hmac-key")
    assert "hmac-key" not in sealed
    assert box.decrypt(sealed) == "hmac-key"
    assert secrets.SecretBox(secrets.new_encryption_key()).decrypt(sealed) is None


def test_invalid_encryption_key_is_a_clear_error():
    with pytest.raises(ValueError, match="AWOOOP_SECRET_KEY"):
        secrets.SecretBox("not-a-key")


def test_json_log_line_carries_the_context_fields():
    record = logging.LogRecord("awooop.x", logging.INFO, __file__, 1, "run claimed", None, None)
    record.action = "run_claimed"
    record.run_id = "r-1"

    line = json.loads(JsonFormatter().format(record))

    assert (line["msg"], line["action"], line["run_id"], line["level"]) == (
        "run claimed",
        "run_claimed",
        "r-1",
        "info",
    )
