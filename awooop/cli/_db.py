"""What the commands that work on the database directly share (``awooop project``,
``outbox``, ``secrets``, ``dev``, ``config``, ``migrate``): their settings, an engine, and the
usage error the command answers with exit status 2.

Settings come from ``AWOOOP_*`` environment variables; with none set, from the checkout's
``.awooop/env`` (:func:`awooop.config.discover`), which the command names on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sqlalchemy import Engine

from awooop import config, db
from awooop.config import ConfigError, Settings


class UsageError(Exception):
    """Invalid input on the command line; the message says what to change."""


def read_environment() -> config.Environment:
    """The variables settings are read from; says on stderr when an env file supplies them."""
    environment = config.discover()
    if environment.env_file is not None:
        print(
            f"awooop: using {environment.env_file} (no database, broker or key in the environment)",
            file=sys.stderr,
        )
    return environment


def settings(*required: str) -> Settings:
    """The settings, ``required`` (default: the database URL and the secret key) checked; a
    missing one's error says where settings were looked for."""
    environment = read_environment()
    try:
        return Settings.from_env(environment.values, required or ("database_url", "secret_key"))
    except ConfigError as error:
        if " not set." not in str(error):
            raise
        raise ConfigError(f"{error}{where_settings_were_looked_for(environment)}") from None


def where_settings_were_looked_for(environment: config.Environment) -> str:
    if environment.env_file is not None:
        return f" (read {environment.env_file} and the environment)"
    explicit = config.deployment_settings(environment.values)
    if explicit:
        shown = ", ".join(explicit)
        return f" ({config.ENV_FILE} is not read while the environment sets {shown})"
    return f" (no {config.ENV_FILE} in {Path.cwd()} or its parents)"


def engine(settings: Settings) -> Engine:
    return db.make_engine(settings.database_url, pool_size=1, settings=settings)
