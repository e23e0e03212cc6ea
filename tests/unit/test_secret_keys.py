"""Several secret keys, newest first: the newest encrypts and signs, every key decrypts and
verifies, a key that no longer opens a stored secret is found, and no key is ever shown."""

from __future__ import annotations

import pytest
from flask import Flask

from awooop import config, secrets
from awooop.config import ConfigError, Settings
from awooop.web import console

OLD, NEW = secrets.new_encryption_key(), secrets.new_encryption_key()
BASE = {"AWOOOP_DATABASE_URL": "postgresql://x/y", "AWOOOP_BROKER_URL": "redis://x"}


def with_keys(value: str) -> Settings:
    return Settings.from_env({**BASE, "AWOOOP_SECRET_KEY": value})


def refusal(value: str) -> str:
    with pytest.raises(ConfigError) as error:
        with_keys(value)
    return str(error.value)


# --- the setting ----------------------------------------------------------------------------


def test_a_comma_separated_secret_key_is_a_list_newest_first():
    assert with_keys(f"{NEW}, {OLD}").secret_keys == (NEW, OLD)


def test_a_single_secret_key_is_a_list_of_one():
    assert with_keys(OLD).secret_keys == (OLD,)


def test_a_bad_key_in_the_list_is_named_by_position_and_not_shown():
    message = refusal(f"{NEW},{OLD[:-4]}")

    assert "AWOOOP_SECRET_KEY: key 2 of 2 is not a Fernet key" in message
    assert OLD[:-4] not in message and NEW not in message


def test_an_empty_entry_in_the_list_is_refused():
    assert "AWOOOP_SECRET_KEY: key 2 of 2 is empty" in refusal(f"{NEW},")


def test_a_key_listed_twice_is_refused():
    message = refusal(f"{NEW},{OLD},{NEW}")

    assert "AWOOOP_SECRET_KEY: key 3 of 3 repeats key 1" in message
    assert NEW not in message


def test_every_key_is_masked_in_repr_and_in_what_awooop_config_prints():
    settings = with_keys(f"{NEW},{OLD}")
    report = config.describe(config.Environment({**BASE, "AWOOOP_SECRET_KEY": f"{NEW},{OLD}"}))

    row = next(r for r in report["settings"] if r["variable"] == "AWOOOP_SECRET_KEY")
    assert row["value"] == "***,***"
    assert "secret_key='***,***'" in repr(settings)
    for key in (NEW, OLD):
        assert key not in repr(settings) and key not in repr(report)


# --- the box --------------------------------------------------------------------------------


def test_the_box_encrypts_with_the_newest_key():
    sealed = secrets.SecretBox([NEW, OLD]).encrypt("hmac-key")

    assert secrets.SecretBox([NEW]).decrypt(sealed) == "hmac-key"
    assert secrets.SecretBox([OLD]).decrypt(sealed) is None


def test_the_box_decrypts_what_an_older_key_encrypted():
    sealed = secrets.SecretBox([OLD]).encrypt("hmac-key")

    assert secrets.SecretBox([NEW, OLD]).decrypt(sealed) == "hmac-key"
    assert secrets.SecretBox([NEW]).decrypt(sealed) is None


def test_reseal_moves_a_secret_to_the_newest_key():
    sealed = secrets.SecretBox([OLD]).encrypt("hmac-key")

    resealed = secrets.SecretBox([NEW, OLD]).reseal(sealed)

    assert resealed.changed and resealed.token is not None
    assert secrets.SecretBox([NEW]).decrypt(resealed.token) == "hmac-key"


def test_reseal_leaves_a_secret_already_under_the_newest_key_as_it_is():
    sealed = secrets.SecretBox([NEW]).encrypt("hmac-key")

    assert secrets.SecretBox([NEW, OLD]).reseal(sealed) == secrets.Resealed(sealed, False)


def test_reseal_of_a_secret_no_key_opens_gives_nothing():
    sealed = secrets.SecretBox([secrets.new_encryption_key()]).encrypt("hmac-key")

    assert secrets.SecretBox([NEW, OLD]).reseal(sealed) == secrets.Resealed(None, False)


# --- console sessions -----------------------------------------------------------------------


def session_serializer(keys: str):
    app = Flask(__name__)
    app.extensions["awooop"] = {}  # what create_app sets up for the blueprints
    console.register(app, with_keys(keys))
    serializer = app.session_interface.get_signing_serializer(app)  # type: ignore[attr-defined]
    assert serializer is not None
    return serializer


def test_a_session_signed_with_an_older_key_is_accepted_and_new_ones_use_the_newest():
    cookie = session_serializer(OLD).dumps({"project_id": "ops"})

    rotated = session_serializer(f"{NEW},{OLD}")

    assert rotated.loads(cookie) == {"project_id": "ops"}
    reissued = rotated.dumps({"project_id": "ops"})
    assert session_serializer(NEW).loads(reissued) == {"project_id": "ops"}


def test_a_session_signed_with_a_dropped_key_is_not_a_session():
    from itsdangerous import BadSignature

    cookie = session_serializer(OLD).dumps({"project_id": "ops"})

    with pytest.raises(BadSignature):
        session_serializer(NEW).loads(cookie)
