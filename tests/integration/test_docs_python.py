"""Every Python block of README.md and docs/*.md runs, as a reader following the page runs it.

How the blocks are run — the convention a page's Python follows:

- A Python block is fenced ```` ```python ````. A block fenced as Python any other way
  (```` ```py ````, ```` ```python3 ````, ```` ```pycon ````…) fails the test, so none escapes.
- **One page, one namespace.** A page's blocks run in order in one namespace: a block may use
  what an earlier block of the same page defined or imported. Each page starts afresh, with
  only the built-in workflows (and the test suite's) registered.
- **Files the reader saves.** A block whose first line is ``# name.py`` is that file: it is
  saved in a directory on ``sys.path`` and imported as the module ``name`` when the page
  reaches it, so later blocks and files import it.
- **The tests a page shows pass.** Every ``test_*`` function the page defines (in a block or
  in a ``test_*.py`` file) is called once the page has run: with no argument, or with the
  ``awooop_env`` fixture of ``awooop.testing``'s pytest plugin.
- **A deployment to talk to.** While the page runs, a web serves the API (in this process,
  on a free port, over the test's database and broker) and a worker drives its runs.
  ``AWOOOP_API_URL`` is its address, and a block's ``http://127.0.0.1:8000`` (the address of
  ``make run`` the docs show) is replaced by it. The projects ``demo`` (what ``make run``
  makes) and ``ops`` (the operations docs' project) exist, and before each block they allow
  every workflow registered so far (but those only the engine starts). ``AWOOOP_API_TOKEN``
  is an operator token of the page's project: ``demo`` on the pages that follow ``make run``
  (README.md, docs/workflows.md), ``ops`` on the others. ``AWOOOP_WEBHOOK_SECRET`` is a
  ``whsec_`` signing secret, as ``awooop project outbound … webhook --generate`` prints.

No block is left out, and none is only looked at: a block that does not run fails its
page's test.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from werkzeug.serving import make_server

from awooop import cli, db
from awooop.config import Settings
from awooop.engine import runner, sweeps
from awooop.outbound import signing
from awooop.store import projects
from awooop.web.app import create_app
from awooop.workflows import registry
from tests.support import threaded_server
from tests.support.docs import PAGES, ROOT, fenced, python_blocks

PYTHON_LIKE = re.compile(r"py|python\d*|pycon|ipython|python-?repl", re.I)
DOCS_ADDRESS = "http://127.0.0.1:8000"
# The pages that follow `make run` work in its project; the others in the operators' one.
DEMO_PAGES = {"README.md", "docs/workflows.md"}
PROJECTS = ("demo", "ops")
FIXTURES = {"awooop_env"}


def pages_with_python() -> list[Path]:
    return [page for page in PAGES if python_blocks(page)]


# --- The deployment the blocks talk to ---------------------------------------------------


class Worker(threading.Thread):
    """A worker in a thread: it claims the oldest claimable run and drives it, and fires
    due timers (the beat's sweep) whenever nothing is claimable."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        super().__init__(name="docs-worker", daemon=True)
        self.engine = engine
        self.settings = settings
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                outcome = runner.execute(self.engine, self.settings, None)
                if outcome is runner.Outcome.NOT_CLAIMED:
                    sweeps.fire_due_timers_once(self.engine, self.settings)
                    self.stopping.wait(0.05)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc


@dataclass(frozen=True)
class Deployment:
    url: str
    tokens: dict[str, str]
    engine: Engine

    def allow_every_workflow(self) -> None:
        names = sorted(
            {wf.name for wf in registry.all_workflows() if not registry.engine_only(wf.name)}
        )
        with db.transaction(self.engine) as conn:
            for project_id in self.tokens:
                projects.set_allowed_workflows(conn, project_id, names, [])


@pytest.fixture
def deployment(settings: Settings, engine: Engine, redis_client) -> Iterator[Deployment]:
    # A project's new allowed workflows reach the web at once.
    settings = dataclasses.replace(settings, auth_cache_seconds=0.0)
    tokens = {p: cli.create_project(settings, p)["api_token"] for p in PROJECTS}
    server = make_server("127.0.0.1", 0, create_app(settings, engine), threaded=True)
    serving = threaded_server.start(server, "docs-web")
    worker = Worker(engine, settings)
    worker.start()
    yield Deployment(f"http://127.0.0.1:{server.server_port}", tokens, engine)
    worker.stopping.set()
    worker.join(timeout=30)
    server.shutdown()
    serving.join(timeout=10)
    assert not worker.is_alive(), "the worker did not stop"
    assert worker.error is None, f"the worker failed: {worker.error!r}"


@pytest.fixture
def saved_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path`` for the files a page saves; their modules forgotten
    afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for path in tmp_path.glob("*.py"):
        sys.modules.pop(path.stem, None)


# --- Running a page ----------------------------------------------------------------------


def run_page(page: Path, deployment: Deployment, directory: Path) -> list[Callable[..., Any]]:
    """Run the page's blocks in order; the test functions they define."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    modules = []
    for block in python_blocks(page):
        # What the earlier blocks registered can be started (the reader allows it).
        deployment.allow_every_workflow()
        code = block.code.replace(DOCS_ADDRESS, deployment.url)
        if block.file_name is not None:
            (directory / block.file_name).write_text(code)
            modules.append(importlib.import_module(block.file_name.removesuffix(".py")))
        else:
            exec(dataclasses.replace(block, code=code).compiled(), namespace)  # noqa: S102
    found = [namespace, *(vars(module) for module in modules)]
    return [fn for names in found for name, fn in names.items() if is_test(name, fn)]


def is_test(name: str, value: object) -> bool:
    return name.startswith("test_") and inspect.isfunction(value)


@pytest.mark.parametrize(
    "page", pages_with_python(), ids=lambda page: page.relative_to(ROOT).as_posix()
)
def test_every_python_block_of_the_page_runs_and_its_tests_pass(
    page: Path,
    deployment: Deployment,
    own_registry: None,
    saved_files: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    # Given the deployment the page's blocks talk to, and the environment the page sets up
    project = "demo" if page.relative_to(ROOT).as_posix() in DEMO_PAGES else "ops"
    monkeypatch.setenv("AWOOOP_API_URL", deployment.url)
    monkeypatch.setenv("AWOOOP_API_TOKEN", deployment.tokens[project])
    monkeypatch.setenv("AWOOOP_WEBHOOK_SECRET", signing.new_secret())

    # When every block runs, in order, Then none fails, nor any test the page shows
    tests = run_page(page, deployment, saved_files)
    shown = [m for b in python_blocks(page) for m in re.findall(r"^def (test_\w+)", b.code, re.M)]
    assert sorted(t.__name__ for t in tests) == sorted(shown)
    for test in tests:
        wanted = list(inspect.signature(test).parameters)
        unknown = set(wanted) - FIXTURES
        assert not unknown, f"{test.__name__} of {page.name} takes {unknown}: not a fixture here"
        test(*(request.getfixturevalue(name) for name in wanted))


def test_every_python_block_is_fenced_as_python() -> None:
    # A block fenced as Python in another way would not be run: none is.
    other = [
        f"{block.page}:{block.line} (```{language})"
        for page in PAGES
        for language, block in fenced(page)
        if PYTHON_LIKE.fullmatch(language) and language != "python"
    ]
    assert other == []


def test_the_pages_with_python_are_found() -> None:
    # The discovery itself: the pages known to show Python are among those run.
    found = {page.relative_to(ROOT).as_posix() for page in pages_with_python()}
    assert {"docs/workflows.md", "docs/testing.md", "docs/client.md"} <= found
