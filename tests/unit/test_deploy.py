"""``deploy/``: the Prometheus alert rules pass ``promtool check rules``; ``promtool test rules``
passes with a firing and a quiet case for every alert; the example scrape configuration is
valid; and every PromQL expression of the rules and the Grafana dashboard names a metric
AwoooP exports — and the dashboard charts every one of them.

promtool comes from Debian's ``prometheus`` package (``make promtool``; CI runs it). Without
it these tests skip, or fail under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import promql_parser
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from awooop import metrics

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "awooop-alerts.yml"
RULE_TESTS = PROMETHEUS / "awooop-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "awooop.json"
# Series Prometheus writes itself for every scrape target (not exported by AwoooP).
PROMETHEUS_SERIES = {"up"}
# Grafana's interval variables, replaced before the PromQL is parsed.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("", "_count", "_sum"),
    "gauge": ("",),
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    path = shutil.which("promtool")
    if path is None:
        message = (
            "promtool is not installed: run `make promtool` (as root on Debian), or "
            "`sudo apt-get install --no-install-recommends prometheus` (its service need not run)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return subprocess.run(
        [path, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=60, check=False
    )


def alert_names() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule["alert"] for group in rules["groups"] for rule in group["rules"]]


def test_the_alert_rules_pass_promtool_check_rules():
    result = promtool("check", "rules", RULES.name)

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in result.stdout


def test_the_alert_rules_pass_their_promtool_unit_tests():
    result = promtool("test", "rules", RULE_TESTS.name)

    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_case():
    cases: dict[str, set[bool]] = {name: set() for name in alert_names()}
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            cases[case["alertname"]].add(bool(case.get("exp_alerts")))

    assert {name: kinds for name, kinds in cases.items() if kinds != {True, False}} == {}


def test_every_alert_is_explained_in_the_operations_guide():
    guide = (ROOT / "docs" / "operations.md").read_text()
    alerts = guide[guide.index("### Alerts") :]
    rules = yaml.safe_load(RULES.read_text())["groups"]

    assert [name for name in alert_names() if f"| `{name}` |" not in alerts] == []
    assert {rule["annotations"]["runbook"] for group in rules for rule in group["rules"]} == {
        "docs/operations.md#alerts"
    }


def test_the_example_scrape_configuration_is_valid():
    result = promtool("check", "config", "prometheus.yml")

    assert result.returncode == 0, result.stdout + result.stderr


def exported_sample_names() -> set[str]:
    """Every sample name AwoooP's processes can export: the counters and histograms of
    awooop.metrics and the gauges read from the database."""
    families = [
        family
        for collector in vars(metrics).values()
        if isinstance(collector, MetricWrapperBase)
        for family in collector.describe()
    ]
    families += list(metrics.DatabaseCollector(None, 0).describe())
    return {family.name + suffix for family in families for suffix in SAMPLE_SUFFIXES[family.type]}


def rule_expressions() -> Iterator[tuple[str, str]]:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            yield f"alert {rule['alert']}", rule["expr"]


def dashboard_expressions() -> Iterator[tuple[str, str]]:
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r}", target["expr"]


def metric_names(expression: str) -> list[str | None]:
    for variable, value in GRAFANA_VARIABLES.items():
        expression = expression.replace(variable, value)
    names: list[str | None] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.append(node.name)

    promql_parser.walk(promql_parser.parse(expression), pre_visit=visit)
    return names


def test_the_name_reader_finds_every_selector_of_an_expression():
    names = metric_names(
        'sum by (le) (rate(a_bucket{x="y"}[$__rate_interval])) / ignoring (code) group_left '
        'sum(b_total offset 1h) and on () (c or vector(0)) unless {__name__=~"d.*"}'
    )

    assert names == ["a_bucket", "b_total", "c", None]


def test_every_expression_names_a_metric_awooop_exports():
    known = exported_sample_names() | PROMETHEUS_SERIES
    expressions = [*rule_expressions(), *dashboard_expressions()]
    assert len(expressions) > 20

    unknown = [
        (where, name)
        for where, expression in expressions
        for name in metric_names(expression)
        if name not in known
    ]

    assert unknown == []


def test_the_dashboard_charts_every_metric_awooop_exports():
    charted = {
        re.sub(r"_(total|bucket|count|sum)$", "", name or "")
        for _, expression in dashboard_expressions()
        for name in metric_names(expression)
    }
    exported = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in exported_sample_names()}

    assert sorted(exported - charted) == []


def test_every_dashboard_query_uses_the_datasource_variable():
    dashboard = json.loads(DASHBOARD.read_text())
    variables = [v["name"] for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    sources = {
        target["datasource"]["uid"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    }

    assert variables == ["datasource"]
    assert sources == {"${datasource}"}
