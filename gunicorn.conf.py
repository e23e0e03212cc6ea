"""gunicorn settings for the `web` process (the benchmark's baseline app uses them too)."""

# (Module-level names here are gunicorn settings: "config" is one, hence no `import config`.)
from awooop.config import settings_or_exit
from awooop.web.gunicorn_hooks import *  # noqa: F403 - JSON logs, metrics directory hooks

# Read and checked here, in gunicorn's master, before any worker starts: invalid settings stop
# the web process with one line naming the variable (exit status 2).
_settings = settings_or_exit()

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
