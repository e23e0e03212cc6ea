"""What the ``awooop_env`` fixture (:mod:`awooop.testing.pytest_plugin`) gives a test: a
fresh, migrated database and the real admission, worker, timers, signals, tool results and
cancels over it, in this process — no Celery, no web server, no broker.

The PostgreSQL server is ``AWOOOP_DATABASE_URL`` or, when that is unset, the one ``awooop
dev up`` recorded in ``.awooop/env`` (the embedded development server). A database is migrated
once per session as a template (:func:`create_template`) and cloned for each test
(:func:`clone`, ``CREATE DATABASE … TEMPLATE``), then dropped.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from awooop import db, devstack, secrets
from awooop.channels.base import digest
from awooop.config import Settings
from awooop.domain.workflow import Workflow
from awooop.engine import lease, management, runner, sweeps
from awooop.engine import tools as tool_results
from awooop.store import admission, projects, runs, signals, timers
from awooop.testing.simulator import run_input
from awooop.workflows import registry

Outcome = runner.Outcome
# Segments that leave the run claimable at once: drive it again.
_AGAIN = {Outcome.WOKEN}
_FINISHED = {Outcome.COMPLETED, Outcome.FAILED, Outcome.CANCELLED}


def server_url() -> str | None:
    """The PostgreSQL server's maintenance database, or None when none is configured."""
    url = os.environ.get("AWOOOP_DATABASE_URL") or devstack.read_env(
        devstack.Paths(Path(".awooop")).env_file
    ).get("AWOOOP_DATABASE_URL")
    if not url:
        return None
    return make_url(url).set(database="postgres").render_as_string(hide_password=False)


def _admin(server_url: str) -> Engine:
    return create_engine(server_url, isolation_level="AUTOCOMMIT", pool_size=1)


def create_template(server_url: str) -> str:
    """A database migrated to head (with the migrations the package ships); its name."""
    from alembic import command
    from alembic.config import Config

    from awooop.migrate import MIGRATIONS

    name = f"awooop_testing_tpl_{os.getpid()}"
    drop_database(server_url, name)
    _create(server_url, name)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["url"] = _url(server_url, name)
    command.upgrade(config, "head")
    return name


def _url(server_url: str, name: str) -> str:
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def _create(server_url: str, name: str, template: str | None = None) -> None:
    admin = _admin(server_url)
    try:
        with admin.connect() as conn:
            clause = f' TEMPLATE "{template}"' if template else ""
            conn.execute(text(f'CREATE DATABASE "{name}"{clause}'))
    finally:
        admin.dispose()


def drop_database(server_url: str, name: str) -> None:
    admin = _admin(server_url)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@contextlib.contextmanager
def environment(server_url: str, template: str) -> Iterator[AwooopEnv]:
    """An :class:`AwooopEnv` over a clone of ``template``, dropped afterwards."""
    name = f"awooop_testing_{uuid.uuid4().hex[:12]}"
    _create(server_url, name, template)
    url = _url(server_url, name)
    engine = db.make_engine(url, pool_size=4)
    settings = Settings(
        database_url=url,
        secret_key=os.environ.get("AWOOOP_SECRET_KEY") or secrets.new_encryption_key(),
        log_level="WARNING",
    )
    try:
        yield AwooopEnv(engine, settings)
    finally:
        lease.stop_keeper()  # the lease keeper the test's runs started
        engine.dispose()
        drop_database(server_url, name)


def new_run(
    project_id: str, workflow: Workflow, input: dict[str, Any], traceparent: str | None = None
) -> admission.NewRun:
    """A run of ``workflow`` on ``input`` (:func:`~awooop.testing.simulator.run_input`'s
    shape) as the ingress admits it, its provider event id the request's key."""
    return admission.NewRun.of(
        workflow, project_id, input, str(input["provider_event_id"]), traceparent
    )


class AwooopEnv:
    """A fresh, migrated database and what a test does with runs on it."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self._projects: dict[uuid.UUID, str] = {}

    def project(
        self,
        workflows: list[Workflow] | tuple[Workflow, ...] = (),
        config: Mapping[str, Any] | None = None,
        project_id: str | None = None,
    ) -> str:
        """A project allowed to start ``workflows`` (registered here if they are not), with
        ``config`` (``actions_url``, ``approvers`` …); its id."""
        project_id = project_id or f"t{uuid.uuid4().hex[:10]}"
        for workflow in workflows:
            registry.register(workflow)
        with db.transaction(self.engine) as conn:
            projects.create_project(conn, project_id, project_id, {})
            # One the engine starts itself (late-compensation) is admitted here, never
            # allowed.
            allowed = {w.name for w in workflows if not registry.engine_only(w.name)}
            projects.set_allowed_workflows(conn, project_id, sorted(allowed), [])
            projects.set_config(conn, project_id, dict(config or {}))
        return project_id

    def start(
        self,
        workflow: Workflow,
        event: Mapping[str, Any] | None = None,
        *,
        channel: str = "api",
        project_id: str | None = None,
        config: Mapping[str, Any] | None = None,
        provider_event_id: str | None = None,
    ) -> uuid.UUID:
        """Admit a run of ``workflow`` on ``event`` (in a new project allowed to run it,
        unless ``project_id`` is given), as the ingress does; its run id."""
        project_id = project_id or self.project([workflow], config)
        registry.register(workflow)
        key = provider_event_id or uuid.uuid4().hex
        run = run_input(event, channel=channel, project=config, provider_event_id=key)
        new = new_run(project_id, workflow, run)
        with db.transaction(self.engine) as conn:
            admitted = admission.admit(conn, new)
        self._projects[admitted.run_id] = project_id
        return admitted.run_id

    def execute(self, run_id: uuid.UUID) -> runner.Outcome:
        """One segment of the real worker (:func:`awooop.engine.runner.execute`)."""
        return runner.execute(self.engine, self.settings, run_id)

    def drive(self, run_id: uuid.UUID, wait_up_to: float = 0.0) -> dict[str, Any]:
        """Run segments until the run finishes or waits; a wait whose timer falls due within
        ``wait_up_to`` seconds (real time: the database's clock times waits) is waited for,
        its timer fired, and the run driven on. The run's row (:meth:`run`)."""
        while True:
            outcome = self.execute(run_id)
            if outcome in _AGAIN:
                continue
            if outcome in _FINISHED:
                return self.run(run_id)
            with self.engine.connect() as conn:
                due_in = timers.next_due_in(conn, run_id)
            if due_in is None or due_in > wait_up_to:
                return self.run(run_id)
            time.sleep(max(0.0, due_in))
            self.fire_timers()

    def fire_timers(self) -> list[timers.FiredTimer]:
        """Fire every due timer, as the beat's sweep does."""
        return sweeps.fire_due_timers_once(self.engine, self.settings)

    def signal(
        self,
        run_id: uuid.UUID,
        name: str,
        payload: Mapping[str, Any] | None = None,
        signal_id: str | None = None,
    ) -> signals.Delivery:
        """Send the signal ``name`` to the run, as ``POST …/signals/{name}`` does."""
        body = dict(payload or {})
        with self.engine.connect() as conn:
            return signals.deliver(
                conn,
                self._projects[run_id],
                run_id,
                name,
                signal_id or uuid.uuid4().hex,
                body,
                digest(body),
            )

    def tool_result(
        self,
        run_id: uuid.UUID,
        step: str,
        output: Any = None,
        *,
        status: str = "succeeded",
        error: str | None = None,
        event_id: str | None = None,
    ) -> tool_results.DeliveryOutcome:
        """Deliver a tool step's result, as ``POST …/tool-results`` does."""
        return tool_results.deliver_result(
            self.engine,
            self._projects[run_id],
            run_id,
            event_id=event_id or uuid.uuid4().hex,
            step=step,
            status=status,
            output=output,
            error=error,
        )

    def cancel(self, run_id: uuid.UUID, actor: str = "tester") -> None:
        """An operator's cancel."""
        management.operate(
            self.engine,
            self.settings,
            "cancel",
            self._projects[run_id],
            run_id,
            operation_id=uuid.uuid4().hex,
            actor=actor,
        )

    def run(self, run_id: uuid.UUID) -> dict[str, Any]:
        """The run's row: ``status``, ``saga_status``, ``saga_steps`` (the journal),
        ``output``, ``failure_code`` …"""
        with self.engine.connect() as conn:
            row = runs.get_run(conn, self._projects[run_id], run_id)
        assert row is not None, f"no run {run_id}"
        return row

    def journal(self, run_id: uuid.UUID) -> list[dict[str, Any]]:
        return list(self.run(run_id)["saga_steps"])
