"""gunicorn settings for the `web` process: ``gunicorn -c python:awooop.web.gunicorn_conf
'awooop.web.app:create_app()'`` (the benchmark's baseline app uses them too).

Command-line options win over these, e.g. ``-b 0.0.0.0:8000`` to listen beyond loopback.
(Module-level names here are gunicorn settings: "config" is one, hence no ``import config``.)
"""

from awooop import failover, logs
from awooop.bootstrap import settings_or_exit
from awooop.migrate import check_schema_or_exit
from awooop.web.gunicorn_hooks import (  # noqa: F401 - gunicorn hooks
    child_exit,
    on_starting,
    post_worker_init,
)

# Read and checked here, in gunicorn's master, before any worker starts: invalid settings stop
# the web process with one line naming the variable (exit status 2).
_settings = settings_or_exit()
# ... and a schema older than this release needs (its `awooop migrate` has not run yet) stops
# it likewise, before any worker serves a request that would fail on what is missing.
logs.configure(_settings.log_level)  # the checks' lines as JSON, like the workers' lines
check_schema_or_exit(_settings, "web")
# ... and says, once, when the database could lose committed transactions on failover (or, with
# AWOOOP_DATABASE_FAILOVER_CHECK=refuse, stops).
failover.check_or_exit(_settings, "web")

bind = f"127.0.0.1:{_settings.port}"
workers = _settings.web_workers
worker_class = "gthread"
threads = _settings.web_threads
backlog = 2048
keepalive = 5
graceful_timeout = 10
# gunicorn's own lines as JSON: its error log on stderr, its access log on stdout.
logconfig_dict = logs.gunicorn_logconfig(access_log=_settings.access_log)
# Paths only — no query strings, no headers: a token must never reach a log line.
accesslog = "-" if _settings.access_log else None
# The line's message; its fields carry method, path, status, size and time apart.
access_log_format = "%(m)s %(U)s %(s)s %(M)sms"
# ... and approval tokens cut out of those paths.
logger_class = "awooop.web.access_log.RedactingLogger"
