"""Reading Prometheus numbers: from a /metrics body, or from this process's registry."""

from __future__ import annotations

from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition body, by (name, labels)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(text: str, name: str, **labels: str) -> float | None:
    """One sample of an exposition body; None when it is not there."""
    return parse(text).get((name, frozenset(labels.items())))


def local(name: str, **labels: str) -> float:
    """A sample of this (test) process's own registry; 0 when never incremented."""
    return REGISTRY.get_sample_value(name, labels) or 0.0
