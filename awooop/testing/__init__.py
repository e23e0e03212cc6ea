"""Testing your own workflows: :class:`Simulator` runs one in memory, in milliseconds, with
outcomes, signals, tool results, approvals and time given by the test; the pytest plugin
(:mod:`awooop.testing.pytest_plugin`, fixture ``awooop_env``) runs it on a real PostgreSQL
through the real worker code. See docs/testing.md."""

from awooop.testing.simulator import (
    Call,
    SimulatedFailure,
    Simulator,
    Waiting,
    run_input,
)

__all__ = ["Call", "SimulatedFailure", "Simulator", "Waiting", "run_input"]
