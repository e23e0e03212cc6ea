"""Accessors for what create_app() put on the application."""

from __future__ import annotations

from typing import Any

from flask import current_app
from sqlalchemy import Engine

from awooop.config import Settings
from awooop.secrets import SecretBox


def _ext() -> dict[str, Any]:
    return current_app.extensions["awooop"]


def settings() -> Settings:
    return _ext()["settings"]


def engine() -> Engine:
    return _ext()["engine"]


def secret_box() -> SecretBox:
    return _ext()["secret_box"]


def enqueue(run_ids: list[Any]) -> int:
    return _ext()["enqueue"](run_ids)
