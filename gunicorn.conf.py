"""gunicorn settings for the `web` process (the benchmark's baseline app uses them too)."""

from awooop.config import Settings
from awooop.web.gunicorn_hooks import *  # noqa: F403 - JSON logs, metrics directory hooks

_settings = Settings.from_env(required=())

bind = f"127.0.0.1:{_settings.port}"
workers = _settings.web_workers
worker_class = "gthread"
threads = _settings.web_threads
backlog = 2048
keepalive = 5
graceful_timeout = 10
# Paths only — no query strings, no headers: a token must never reach a log line.
accesslog = "-" if _settings.access_log else None
# ... and approval tokens cut out of those paths.
logger_class = "awooop.web.access_log.RedactingLogger"
