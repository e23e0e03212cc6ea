"""gunicorn settings for the `web` process: ``gunicorn -c python:awooop.web.gunicorn_conf
'awooop.web.app:create_app()'`` (the benchmark's baseline app uses them too).

Command-line options win over these, e.g. ``-b 0.0.0.0:8000`` to listen beyond loopback.
"""

from awooop.config import Settings

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
access_log_format = '%(h)s "%(m)s %(U)s" %(s)s %(B)s %(M)sms'
# ... and approval tokens cut out of those paths.
logger_class = "awooop.web.access_log.RedactingLogger"
