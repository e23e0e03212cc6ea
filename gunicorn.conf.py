"""gunicorn reads ``./gunicorn.conf.py`` by default; the settings ship in the package as
``awooop.web.gunicorn_conf`` (``gunicorn -c python:awooop.web.gunicorn_conf ...``), so an
installed wheel has them too. This file keeps ``gunicorn -c gunicorn.conf.py`` working in a
checkout (the tests and the benchmark use it)."""

from awooop.web.gunicorn_conf import *  # noqa: F403
