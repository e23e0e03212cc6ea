"""Which workflows exist, by name and version.

Built-in workflows register on import of :mod:`awooop.workflows.builtin`; deployments add
their own modules with ``AWOOOP_WORKFLOW_MODULES`` (comma-separated import paths, imported by
:func:`import_modules` when a process starts), each of which calls :func:`register`.
Old versions stay registered while runs use them.

A workflow registered with ``engine_only=True`` is started by the engine itself (e.g.
``late-compensation``): no project may route a channel to it or let clients start it by name.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable

from awooop.domain.workflow import Workflow

_WORKFLOWS: dict[tuple[str, int], Workflow] = {}
# Names of the workflows only the engine starts (every version of the name).
_ENGINE_ONLY: set[str] = set()


class UnknownWorkflow(LookupError):
    """The run's workflow (name, version) is not registered in this process."""


def register(workflow: Workflow, *, engine_only: bool = False) -> Workflow:
    """Register ``workflow``; ``engine_only``: the engine starts it itself, never a project's
    route or a client's start request. It marks the name, in all its versions; registering the
    workflow again without the flag leaves the mark."""
    key = (workflow.name, workflow.version)
    existing = _WORKFLOWS.get(key)
    if existing is not None and existing.digest != workflow.digest:
        raise ValueError(
            f"workflow {workflow.name} v{workflow.version} is already registered with another "
            "definition; bump the version"
        )
    _WORKFLOWS[key] = workflow
    if engine_only:
        _ENGINE_ONLY.add(workflow.name)
    return workflow


def engine_only(name: str) -> bool:
    """Whether the workflow called ``name`` is started by the engine only (False for a name
    no workflow has)."""
    load()
    return name in _ENGINE_ONLY


def get(name: str, version: int) -> Workflow:
    load()
    try:
        return _WORKFLOWS[(name, version)]
    except KeyError:
        raise UnknownWorkflow(f"workflow {name} v{version} is not registered") from None


def latest(name: str) -> Workflow | None:
    load()
    versions = [wf for (n, _), wf in _WORKFLOWS.items() if n == name]
    return max(versions, key=lambda wf: wf.version) if versions else None


def all_workflows() -> list[Workflow]:
    load()
    return sorted(_WORKFLOWS.values(), key=lambda wf: (wf.name, wf.version))


_builtin_loaded = False
# Re-entrant: a built-in module that looks a workflow up while it is imported reaches load()
# again on the same thread, and must not wait for itself.
_load_lock = threading.RLock()


def load() -> None:
    """Import the built-in workflows (once). A thread that calls this while another is
    importing them waits until they are all registered."""
    global _builtin_loaded
    if _builtin_loaded:
        return
    with _load_lock:
        if _builtin_loaded:
            return
        importlib.import_module("awooop.workflows.builtin")
        importlib.import_module("awooop.workflows.operations")
        importlib.import_module("awooop.workflows.late")
        _builtin_loaded = True


def import_modules(modules: Iterable[str]) -> None:
    """Import deployment workflow modules (``AWOOOP_WORKFLOW_MODULES``) at process start.

    A module that does not exist is a :class:`~awooop.config.ConfigError` naming the
    variable; an error inside a module that exists propagates as it is.
    """
    from awooop.config import ConfigError

    load()
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if not (module == missing or module.startswith(f"{missing}.")):
                raise
            raise ConfigError(
                f"AWOOOP_WORKFLOW_MODULES: cannot import {module!r} ({exc})"
            ) from None
