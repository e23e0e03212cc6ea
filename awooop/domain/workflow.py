"""Declaring workflows: a name, a version, ordered steps with handlers.

This is the skeleton's step runner contract; the saga engine grows it (compensation, retry
policies, timeouts, resolvers) without changing how a simple workflow is written::

    def summarise(ctx: StepContext) -> dict:
        return {"text": ctx.input["event"]["message"]["text"]}

    DEMO = Workflow("demo", version=1, steps=[Step("summarise", summarise)])

A handler receives a :class:`StepContext` and returns something JSON-serialisable. It may be
run more than once (work is at-least-once): use ``ctx.effect_id`` as the idempotency key for
anything it changes elsewhere.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class StepContext:
    run_id: str
    project_id: str
    input: Mapping[str, Any]
    # Outputs of the steps that already succeeded, by step name.
    outputs: Mapping[str, Any]
    step: str
    # The run's claim number (attempt_count): 1 for the first worker to hold it.
    attempt: int
    # Stable across retries of this step: the idempotency key for downstream calls.
    effect_id: str
    # Unique per attempt.
    command_id: str
    _heartbeat: Callable[[], bool] = field(repr=False, default=lambda: True)
    _lease_held: Callable[[], bool] = field(repr=False, default=lambda: True)

    def heartbeat(self) -> bool:
        """Renew the lease now (long steps); False when the lease is lost — stop then."""
        return self._heartbeat()

    @property
    def lease_held(self) -> bool:
        return self._lease_held()


Handler = Callable[[StepContext], Any]


@dataclass(frozen=True)
class Step:
    name: str
    handler: Handler

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "handler": f"{self.handler.__module__}.{self.handler.__qualname__}",
        }


@dataclass(frozen=True)
class Workflow:
    name: str
    version: int
    steps: tuple[Step, ...]
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    # None: the deployment's AWOOOP_LEASE_TTL_SECONDS.
    lease_ttl_seconds: float | None = None
    description: str = ""

    def __init__(
        self,
        name: str,
        version: int,
        steps: list[Step] | tuple[Step, ...],
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        lease_ttl_seconds: float | None = None,
        description: str = "",
    ) -> None:
        if not steps:
            raise ValueError(f"workflow {name!r} has no steps")
        names = [s.name for s in steps]
        if len(set(names)) != len(names):
            raise ValueError(f"workflow {name!r} has duplicate step names: {names}")
        if max_attempts < 1:
            raise ValueError(f"workflow {name!r}: max_attempts must be >= 1")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "steps", tuple(steps))
        object.__setattr__(self, "max_attempts", max_attempts)
        object.__setattr__(self, "lease_ttl_seconds", lease_ttl_seconds)
        object.__setattr__(self, "description", description)

    @functools.cached_property
    def digest(self) -> str:
        """SHA-256 over the structure and policies; a run keeps the digest it started with."""
        shape = {
            "name": self.name,
            "version": self.version,
            "max_attempts": self.max_attempts,
            "lease_ttl_seconds": self.lease_ttl_seconds,
            "steps": [s.describe() for s in self.steps],
        }
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()

    def step_index(self, name: str) -> int:
        for i, step in enumerate(self.steps):
            if step.name == name:
                return i
        raise KeyError(name)
