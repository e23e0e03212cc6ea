"""Testing your own workflows: :class:`Simulator` runs one in memory, in milliseconds, with
outcomes, signals, tool results, approvals and time given by the test; the pytest plugin
(:mod:`awooop.testing.pytest_plugin`, fixture ``awooop_env``) runs it on a real PostgreSQL
through the real worker code. See docs/testing.md.

The names are imported when first used, so that the pytest plugin (a submodule) loads
nothing of AwoooP before the user's conftest.py has set its environment.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from awooop.testing.simulator import Call, SimulatedFailure, Simulator, Waiting, run_input

__all__ = ["Call", "SimulatedFailure", "Simulator", "Waiting", "run_input"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("awooop.testing.simulator"), name)
    raise AttributeError(f"module 'awooop.testing' has no attribute {name!r}")
