"""The cluster suite's size knob, results file and document (``AWOOOP_CLUSTER_SCALE``,
``.awooop/cluster/results.jsonl``, ``docs/cluster.md``)."""

from __future__ import annotations

from tests.chaos import report
from tests.support.processes import ROOT

SUITE = report.Suite(
    "cluster", ROOT / "docs" / "cluster.md", "AWOOOP_CLUSTER_SCALE", "AWOOOP_CLUSTER_RESULTS"
)
