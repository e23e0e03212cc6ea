"""``deploy/``: the Prometheus alert rules pass ``promtool check rules``; ``promtool test rules``
passes with a firing and a quiet case for every alert; the example scrape configuration is
valid; every rule has a severity, a summary, a description and an absolute runbook URL whose
anchor is a heading of docs/observability.md; every PromQL expression of the rules and the
Grafana dashboard names a metric AwoooP exports — and the dashboard charts every one of them,
scoped by its job, instance and workflow variables, over ``$__rate_interval``.

promtool comes from Debian's ``prometheus`` package (``make promtool``; CI runs it). Without
it these tests skip, or fail under ``CI=true``.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import promql_parser
import yaml
from prometheus_client.metrics import MetricWrapperBase

from awooop import metrics
from tests.support import debian_tools

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "awooop-alerts.yml"
RULE_TESTS = PROMETHEUS / "awooop-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "awooop.json"
# Series Prometheus writes itself for every scrape target (not exported by AwoooP).
PROMETHEUS_SERIES = {"up"}
# The one prefix of every rule's runbook_url (the observability guide); the anchor follows it.
RUNBOOK_BASE = "https://github.com/awooop/awooop/blob/main/docs/observability.md"
GUIDE = ROOT / "docs" / "observability.md"
# The annotations of every rule, in the monitoring-mixin shape.
RUNBOOK_KEYS = ["description", "runbook_url", "summary"]
# Grafana's interval variables, replaced before the PromQL is parsed ($__rate_interval by a
# duration no expression writes by hand, so a range that used it can be told apart).
RATE_INTERVAL = timedelta(seconds=7777)
GRAFANA_VARIABLES = {"$__rate_interval": "7777s", "$__interval": "1m", "$__range": "1h"}
SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("", "_count", "_sum"),
    "gauge": ("",),
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    path = debian_tools.executable("promtool", "prometheus")
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


def rules() -> list[dict]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, spaces to hyphens, punctuation
    other than hyphens and underscores dropped."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def guide_anchors() -> set[str]:
    return {
        github_anchor(line.lstrip("#"))
        for line in GUIDE.read_text().splitlines()
        if re.match(r"#{1,6} ", line)
    }


def test_the_anchor_reader_spells_anchors_as_github_does():
    assert github_anchor(" AwoooPTargetDown") == "awoooptargetdown"
    assert (
        github_anchor("A run makes no progress (E-STEP-003)")
        == "a-run-makes-no-progress-e-step-003"
    )


def test_every_rule_has_a_severity_a_summary_a_description_and_a_runbook():
    shapes = {
        rule["alert"]: (
            rule["labels"].get("severity") in ("critical", "warning"),
            sorted(rule["annotations"]),
        )
        for rule in rules()
    }

    assert {name: s for name, s in shapes.items() if s != (True, RUNBOOK_KEYS)} == {}


def test_every_runbook_url_is_absolute_and_its_anchor_is_a_heading_of_the_guide():
    anchors = guide_anchors()
    urls = {rule["alert"]: rule["annotations"]["runbook_url"] for rule in rules()}

    assert {n: u for n, u in urls.items() if u != f"{RUNBOOK_BASE}#{n.lower()}"} == {}
    assert [n for n in urls if n.lower() not in anchors] == []


def test_every_alert_is_listed_in_the_observability_guide():
    guide = GUIDE.read_text()
    alerts = guide[guide.index("## The alert rules") :]

    assert [name for name in alert_names() if f"[`{name}`](#{name.lower()})" not in alerts] == []


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


def selectors(expression: str) -> list[tuple[str, dict[str, str]]]:
    """Each vector selector of ``expression``: its metric name and its matchers."""
    for variable, value in GRAFANA_VARIABLES.items():
        expression = expression.replace(variable, value)
    found: list[tuple[str, dict[str, str]]] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            matchers = {m.name: m.value for m in node.matchers.matchers}
            found.append((node.name or "", matchers))

    promql_parser.walk(promql_parser.parse(expression), pre_visit=visit)
    return found


def ranges(expression: str) -> list[timedelta]:
    """The range of every range selector of ``expression``."""
    for variable, value in GRAFANA_VARIABLES.items():
        expression = expression.replace(variable, value)
    found: list[timedelta] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.MatrixSelector):
            found.append(node.range)

    promql_parser.walk(promql_parser.parse(expression), pre_visit=visit)
    return found


def labels_of(metric: str) -> set[str]:
    """The label names a metric AwoooP exports has (by family name)."""
    family = re.sub(r"_(total|bucket|count|sum)$", "", metric)
    for collector in vars(metrics).values():
        if isinstance(collector, MetricWrapperBase) and collector._name == family:
            return set(collector._labelnames)
    return set()


def test_the_observability_guide_lists_every_metric_awooop_exports():
    guide = GUIDE.read_text()
    table = guide[guide.index("## Metrics") : guide.index("Labels are")]
    listed = {
        re.sub(r"_(total|bucket|count|sum)$", "", name)
        for name in re.findall(r"`(awooop_\w+)`", table)
    }
    exported = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in exported_sample_names()}

    assert sorted(exported - listed) == []


def test_every_dashboard_selector_is_scoped_by_the_job_instance_and_workflow_variables():
    unscoped = []
    for where, expression in dashboard_expressions():
        for name, matchers in selectors(expression):
            wanted = {"job": "$job", "instance": "$instance"}
            if "workflow" in labels_of(name):
                wanted["workflow"] = "$workflow"
            if any(matchers.get(label) != value for label, value in wanted.items()):
                unscoped.append((where, name))

    assert unscoped == []
    assert any(
        "workflow" in labels_of(n) for _, e in dashboard_expressions() for n, _ in selectors(e)
    )


def test_every_dashboard_range_is_the_rate_interval():
    fixed = [
        (where, r)
        for where, expression in dashboard_expressions()
        for r in ranges(expression)
        if r != RATE_INTERVAL
    ]

    assert fixed == []
    assert ranges("rate(a[$__rate_interval]) + increase(b[5m])") == [
        RATE_INTERVAL,
        timedelta(minutes=5),
    ]


def test_the_dashboard_variables_and_its_links_to_the_console():
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}

    assert [n for n in ("job", "instance", "workflow") if variables[n]["type"] != "query"] == []
    assert variables["console_url"]["type"] == "textbox"
    assert dashboard["links"] and all(
        link["url"].startswith("${console_url}/console/") for link in dashboard["links"]
    )


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
