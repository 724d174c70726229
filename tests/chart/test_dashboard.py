"""The Grafana dashboard: its ConfigMap, and every query checked by promtool and against /metrics.

- The chart renders `dashboards/dra-webhook.json` into a ConfigMap with the label the dashboard
  sidecar of Grafana's chart looks for, only with `grafanaDashboard.enabled`.
- Every PromQL expression (panel targets and the template variables' selectors) is written as a
  recording rule and checked by `promtool check rules` (hack/get-promtool; skipped without it,
  failed under CI=true).
- Every metric a query reads is a series the real ASGI app exposes at /metrics after it served
  the load test's reviews over a live view of a fake API server holding PolicyReports (so the
  live source's and the migration gauge's families are there too); every label a query selects
  or groups by is on that metric, or is one the scrape adds.

Scrapes by the chart's ServiceMonitor carry prometheus-operator's target labels (job, namespace,
service, pod, container, endpoint, instance); a metric's own label of the same name would arrive
as `exported_<name>` (honor_labels false), so no metric of the webhook has one (checked here on
every family /metrics shows): the admission endpoint is `webhook`, the migration gauge's
namespace `workload_namespace`.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import orjson
import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.certs import mint
from app.config.policy import parse_policy
from app.config.settings import ClusterSource, Settings
from app.metrics import Metrics
from app.transport.app import create_app
from loadtest.dashboard import (
    ApiThread,
    dashboard_policy,
    demo_objects,
    excepted_reviews,
    migration_counts,
    substitute,
)
from loadtest.scenarios import PLACEHOLDER_UID, SCENARIOS
from tests.assets import REPO, k8s_tool, promtool

CHART = REPO / "charts" / "dra-webhook"
DASHBOARD = CHART / "dashboards" / "dra-webhook.json"
PROMETHEUS_RULE = CHART / "templates" / "prometheusrule.yaml"
Obj = dict[str, Any]

TARGET_LABELS = frozenset(
    {"job", "namespace", "service", "pod", "container", "endpoint", "instance"}
)
"""What prometheus-operator adds to every series a ServiceMonitor scrapes."""
SELECTED_TARGET_LABELS = frozenset({"job", "namespace"})
"""The target labels the dashboard selects a release by ($job, $namespace)."""
API_SERVER_METRICS = frozenset(
    {"apiserver_admission_webhook_rejection_count", "apiserver_admission_webhook_fail_open_count"}
)
"""The API server's own metrics: the only ones read that the webhook does not export (the same
the DraWebhookCallsFailing alert reads)."""
VARIABLES = {"job": "dra-webhook", "namespace": "dra-webhook", "__rate_interval": "1m",
             "__range": "6h"}  # fmt: skip


def _dashboard() -> Obj:
    dashboard: Obj = json.loads(DASHBOARD.read_text())
    return dashboard


def _panels() -> list[Obj]:
    found = []
    for panel in _dashboard()["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def _targets() -> list[tuple[str, str]]:
    """(panel title and refId, expr) of every panel target."""
    return [
        (f"{panel['title']} {target['refId']}", target["expr"])
        for panel in _panels()
        for target in panel.get("targets", [])
    ]


def _variable_selectors() -> list[tuple[str, str]]:
    """(variable, the series selector of its label_values query)."""
    found = []
    for variable in _dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text)
        assert match, f"{variable['name']}: {text}"
        found.append((variable["name"], match.group(1)))
    return found


def _all_exprs() -> list[tuple[str, str]]:
    return _targets() + [(f"variable {n}", e) for n, e in _variable_selectors()]


# -- reading PromQL ----------------------------------------------------------------------------

_STRING = r'"(?:[^"\\]|\\.)*"'
_SELECTOR = re.compile(r"([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}")
_MATCHER = re.compile(rf"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*{_STRING}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_LABEL_REPLACE = re.compile(
    rf"label_replace\s*\(.*?,\s*\"(\w+)\"\s*,\s*{_STRING}\s*,\s*\"(\w+)\"\s*,\s*{_STRING}\s*\)"
)
_IDENTIFIER = re.compile(r"(?<![\w.:$])[a-zA-Z_:][\w:]*")
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan"})


@dataclass(frozen=True)
class Query:
    metrics: frozenset[str]
    """Every metric name read (identifiers that are not functions, keywords or labels)."""
    selected: dict[str, frozenset[str]]
    """Metric -> the label names its selectors match on."""
    grouped: frozenset[str]
    """Labels of by/without/on/ignoring/group_* clauses and label_replace's source labels."""
    replaced: frozenset[tuple[str, str]]
    """label_replace's (destination, source) labels."""


def read_query(expr: str) -> Query:
    selected: dict[str, frozenset[str]] = {}
    for match in _SELECTOR.finditer(expr):
        if match.group(1):
            names = frozenset(_MATCHER.findall(match.group(2)))
            selected[match.group(1)] = selected.get(match.group(1), frozenset()) | names
    replaced = frozenset(_LABEL_REPLACE.findall(expr))
    rest = re.sub(_STRING, '""', expr)
    rest = re.sub(r"\{[^}]*\}", " ", rest)
    rest = re.sub(r"\[[^\]]*\]", " ", rest)
    grouped = {label.strip() for m in _GROUPING.finditer(rest) for label in m.group(1).split(",")}
    rest = _GROUPING.sub(" ", rest)
    metrics = {
        m.group(0)
        for m in _IDENTIFIER.finditer(rest)
        if m.group(0) not in _KEYWORDS and not rest[m.end() :].lstrip().startswith("(")
    }
    grouped |= {source for _, source in replaced}
    return Query(frozenset(metrics), selected, frozenset(grouped - {""}), replaced)


@pytest.mark.parametrize(
    ("expr", "metrics", "grouped"),
    [
        ('sum(rate(dra_webhook_nope_total{job="$job"}[5m]))', {"dra_webhook_nope_total"}, set()),
        ("histogram_quantile(0.99, sum by (le, kind) (rate(x_bucket[1m])))", {"x_bucket"},
         {"le", "kind"}),
        ("count(a == 0) or vector(0) + time() - b", {"a", "b"}, set()),
        ('label_replace(rate(c{d="e"}[1m]), "f", "$1", "exported_f", "(.+)")', {"c"},
         {"exported_f"}),
        ("max without (pod) (g) / on (job) group_left (mode) h", {"g", "h"},
         {"pod", "job", "mode"}),
    ],
)  # fmt: skip
def test_reading_a_query_finds_its_metrics_and_labels(
    expr: str, metrics: set[str], grouped: set[str]
) -> None:
    query = read_query(expr)
    assert query.metrics == metrics
    assert query.grouped == grouped


# -- the chart's ConfigMap ---------------------------------------------------------------------


def _render(*values: str) -> list[Obj]:
    result = subprocess.run(
        [k8s_tool("helm"), "template", "rel", str(CHART), "-n", "dra-system", *values],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _dashboards(docs: list[Obj]) -> list[Obj]:
    return [d for d in docs if d["kind"] == "ConfigMap" and "dra-webhook.json" in d["data"]]


def test_no_dashboard_unless_enabled() -> None:
    assert _dashboards(_render()) == []
    assert _dashboards(_render("--set=grafanaDashboard.enabled=false")) == []


def test_enabled_it_is_a_configmap_the_grafana_sidecar_loads_holding_the_charts_json() -> None:
    (config,) = _dashboards(_render("--set=grafanaDashboard.enabled=true"))
    kubernetes_validate.validate(config, "1.34.0", strict=True)
    assert config["metadata"]["name"] == "rel-dra-webhook-dashboard"
    assert config["metadata"]["namespace"] == "dra-system"
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "annotations" not in config["metadata"]
    assert json.loads(config["data"]["dra-webhook.json"]) == _dashboard()


def test_the_sidecar_label_namespace_and_folder_annotation_come_from_values() -> None:
    (config,) = _dashboards(
        _render(
            "--set=grafanaDashboard.enabled=true",
            "--set=grafanaDashboard.label=dashboards.example.com/grafana",
            "--set=grafanaDashboard.labelValue=dra",
            "--set=grafanaDashboard.namespace=monitoring",
            "--set=grafanaDashboard.annotations.grafana_folder=DRA",
        )
    )
    meta = config["metadata"]
    assert meta["labels"]["dashboards.example.com/grafana"] == "dra"
    assert "grafana_dashboard" not in meta["labels"]
    assert meta["namespace"] == "monitoring"
    assert meta["annotations"] == {"grafana_folder": "DRA"}


@pytest.mark.parametrize(
    ("override", "complaint"),
    [
        ("grafanaDashboard.folder=x", "additional properties 'folder' not allowed"),
        ("grafanaDashboard.label=not a label", "does not match pattern"),
        ("grafanaDashboard.namespace=Monitoring", "does not match pattern"),
    ],
)
def test_the_schema_refuses_unknown_dashboard_keys_and_bad_names(
    override: str, complaint: str
) -> None:
    result = subprocess.run(
        [k8s_tool("helm"), "template", "rel", str(CHART), "--set", override],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    assert complaint in result.stderr


# -- the dashboard's shape ---------------------------------------------------------------------


def test_it_is_a_grafana_dashboard_with_a_prometheus_datasource_variable() -> None:
    dashboard = _dashboard()
    assert dashboard["schemaVersion"] >= 39
    assert dashboard["uid"] == "dra-webhook"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "job"):
        assert variables[name]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_panels_fit_the_grid_without_overlapping_and_have_unique_ids() -> None:
    taken: dict[tuple[int, int], str] = {}
    ids = [panel["id"] for panel in _panels()]
    assert len(ids) == len(set(ids))
    for panel in _panels():
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


def test_every_target_reads_the_datasource_variable_and_selects_the_release() -> None:
    for panel in _panels():
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            for name, matchers in _SELECTOR.findall(target["expr"]):
                if name.startswith("dra_webhook_"):
                    assert 'job="$job"' in matchers, (panel["title"], name)
                    assert 'namespace="$namespace"' in matchers, (panel["title"], name)


def test_the_panels_cover_what_operators_watch() -> None:
    """Migration per namespace and mode, denials and warnings, translations, exceptions,
    latency percentiles, view freshness, errors and failing open: each read by some panel."""
    read = {m for _, expr in _targets() for m in read_query(expr).metrics}
    assert {
        "dra_webhook_legacy_workloads",
        "dra_webhook_denials_total",
        "dra_webhook_audit_findings_total",
        "dra_webhook_exceptions_total",
        "dra_webhook_exception_end_timestamp_seconds",
        "dra_webhook_translations_total",
        "dra_webhook_admission_duration_seconds_bucket",
        "dra_webhook_cluster_stale",
        "dra_webhook_legacy_workloads_last_read_timestamp_seconds",
        "dra_webhook_check_errors_total",
        "apiserver_admission_webhook_fail_open_count",
    } <= read
    quantiles = {
        match
        for _, expr in _targets()
        for match in re.findall(r"histogram_quantile\((0\.\d+)", expr)
    }
    assert {"0.5", "0.95", "0.99"} <= quantiles


# -- PromQL syntax: promtool -------------------------------------------------------------------


def test_every_query_is_promql_promtool_accepts(tmp_path: Path) -> None:
    rules = [
        {"record": f"dashboard:query_{index}", "expr": substitute(expr, VARIABLES)}
        for index, (_, expr) in enumerate(_all_exprs())
    ]
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    result = subprocess.run(
        [promtool(), "check", "rules", "rules.yaml"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_promtool_would_refuse_a_broken_query(tmp_path: Path) -> None:
    """The check above can fail: an unbalanced expression is refused."""
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "r", "expr": "sum(x"}]}]})
    )
    result = subprocess.run(
        [promtool(), "check", "rules", "rules.yaml"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0


# -- metric and label names: the real /metrics -------------------------------------------------


def _review_bodies() -> Iterator[tuple[str, bytes]]:
    """Every review the load test sends, and the pods the picture's two exceptions cover."""
    for scenario in SCENARIOS:
        yield scenario.endpoint, scenario.body.replace(PLACEHOLDER_UID, b"dashboard-test")
    for endpoint, review in excepted_reviews():
        yield endpoint, orjson.dumps(review)


def _wait(client: TestClient, done: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not done(client):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def exposition(tmp_path_factory: pytest.TempPathFactory) -> str:
    """/metrics of the real app over a live view of the fake API server, after it answered
    the load test's reviews, the excepted pods and a request that is not a review."""
    work = tmp_path_factory.mktemp("dashboard")
    mint(work / "certs")
    with ApiThread() as api:
        for obj in demo_objects():
            api.call(lambda server, obj=obj: server.put(obj))
        api.call(lambda server: server.reports.update(migration_counts(0.5)))
        settings = Settings(
            cluster_source=ClusterSource.KUBECONFIG,
            kubeconfig=api.server.write_kubeconfig(work / "kubeconfig"),
            cert_dir=work / "certs",
            migration_gauge_interval_seconds=0.1,
        )
        policy = parse_policy(dashboard_policy(dt.datetime.now(dt.UTC).date()), "dashboard")
        metrics = Metrics()
        app = create_app(settings, policy=policy, metrics=metrics)
        with TestClient(app, raise_server_exceptions=False) as client:
            _wait(client, lambda c: c.get("/readyz").status_code == 200, "the live view to sync")
            headers = {"content-type": "application/json"}
            for endpoint, body in _review_bodies():
                assert client.post(f"/{endpoint}", content=body, headers=headers).status_code == 200
            assert client.post("/validate", content=b"[]", headers=headers).status_code == 400
            # No review makes a check raise (that is a bug); count one as the webhook would.
            metrics.count_check_error("validate", "dra-only")
            _wait(
                client,
                lambda c: "dra_webhook_legacy_workloads{" in c.get("/metrics").text,
                "the migration gauge to read the PolicyReports",
            )
            return client.get("/metrics").text


@pytest.fixture(scope="module")
def exposed(exposition: str) -> dict[str, frozenset[str]]:
    """Every sample name /metrics shows (histograms as _bucket, _sum, _count), with its labels."""
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return {name: frozenset(found) for name, found in labels.items()}


def test_every_metric_a_query_reads_is_one_the_webhook_exposes(
    exposed: dict[str, frozenset[str]],
) -> None:
    missing = {
        (where, metric)
        for where, expr in _all_exprs()
        for metric in read_query(expr).metrics
        if metric not in exposed and metric not in API_SERVER_METRICS
    }
    assert missing == set()


def test_the_api_server_metrics_read_are_the_ones_the_alerts_read() -> None:
    rules = PROMETHEUS_RULE.read_text()
    for metric in API_SERVER_METRICS:
        assert metric in rules


def _labels_of(metric: str, exposed: dict[str, frozenset[str]]) -> frozenset[str]:
    """A metric's labels as Prometheus stores them after a ServiceMonitor's scrape."""
    own = exposed[metric]
    return (own - TARGET_LABELS) | {f"exported_{label}" for label in own & TARGET_LABELS}


def test_every_label_a_query_selects_or_groups_by_is_on_its_metrics(
    exposed: dict[str, frozenset[str]],
) -> None:
    problems = []
    for where, expr in _all_exprs():
        query = read_query(expr)
        ours = query.metrics & exposed.keys()  # unexposed ones fail the test above
        if not ours:
            continue
        for metric, selected in query.selected.items():
            if metric in ours:
                unknown = selected - _labels_of(metric, exposed) - SELECTED_TARGET_LABELS
                problems += [f"{where}: {metric}{{{label}}}" for label in sorted(unknown)]
        stored = set().union(*(_labels_of(metric, exposed) for metric in ours))
        unknown = query.grouped - stored
        problems += [f"{where}: by ({label})" for label in sorted(unknown)]
    assert problems == []


def test_a_query_naming_an_unexposed_metric_or_label_would_be_caught(
    exposed: dict[str, frozenset[str]],
) -> None:
    typo = read_query('sum by (reasons) (rate(dra_webhook_denial_total{job="$job"}[1m]))')
    assert not typo.metrics <= exposed.keys()
    gauge = read_query('max by (exported_namespace) (dra_webhook_legacy_workloads{job="$job"})')
    (metric,) = gauge.metrics
    assert "exported_namespace" not in _labels_of(metric, exposed)
    assert "workload_namespace" in _labels_of(metric, exposed)


def test_no_metric_of_the_webhook_has_a_label_the_scrape_adds(
    exposed: dict[str, frozenset[str]],
) -> None:
    """A ServiceMonitor's scrape renames such a label `exported_<name>`: an alert or panel
    selecting it as /metrics shows it (`endpoint="mutate"`) would never match."""
    ours = {name: labels for name, labels in exposed.items() if name.startswith("dra_webhook_")}
    assert len(ours) > 40  # every family: the live source's, the gauge's, the exceptions'
    clashes = {name: sorted(labels & TARGET_LABELS) for name, labels in ours.items()}
    assert {name: found for name, found in clashes.items() if found} == {}


def test_each_policy_exception_s_end_is_exposed_as_a_unix_time(exposition: str) -> None:
    """The dashboard's "Exceptions ending soon" reads it: one series per exception of the
    policy, set at start, the first instant it no longer applies (midnight UTC after `until`)."""
    policy = parse_policy(dashboard_policy(dt.datetime.now(dt.UTC).date()), "dashboard")
    ends = {
        sample.labels["exception"]: sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == "dra_webhook_exception_end_timestamp_seconds"
    }
    assert ends == {
        e.name: dt.datetime.combine(e.until + dt.timedelta(days=1), dt.time(), dt.UTC).timestamp()
        for e in policy.exceptions
    }
    assert len(ends) == 2
