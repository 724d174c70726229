"""The chart's PrometheusRule: every alert unit-tested with `promtool test rules`.

The rules are rendered with helm (release dra-webhook in namespace dra-webhook, so job="dra-webhook"),
their groups written to rules.yaml beside the committed test files (tests/alerts/*.test.yaml),
and promtool runs them. promtool comes from hack/get-promtool; without it the tests skip, or
fail under CI=true (tests/assets.py).

The test files compare each alert's labels and `summary`; the descriptions are static text, and
each must name a section of docs/operations.md that exists.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.cluster.stats import SourceStats
from app.cluster.view import Kind
from app.metrics import Metrics
from tests.assets import REPO, k8s_tool, promtool

HERE = Path(__file__).parent
CHART = REPO / "charts" / "dra-webhook"
OPERATIONS = REPO / "docs" / "operations.md"
Obj = dict[str, Any]


def _render(*values: str) -> Obj:
    result = subprocess.run(
        [k8s_tool("helm"), "template", "dra-webhook", str(CHART), "-n", "dra-webhook",
         "--show-only=templates/prometheusrule.yaml", "--set=prometheusRule.enabled=true",
         "--set=serviceMonitor.enabled=true", *values],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rule: Obj = yaml.safe_load(result.stdout)
    return rule


def _rules(rule: Obj) -> list[Obj]:
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


@pytest.fixture(scope="module")
def rendered() -> Obj:
    return _render()


@pytest.fixture(scope="module")
def workdir(rendered: Obj, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rules.yaml (descriptions dropped) and the test files, side by side."""
    folder = tmp_path_factory.mktemp("alerts")
    groups = copy.deepcopy(rendered["spec"]["groups"])
    for rule in (r for g in groups for r in g["rules"]):
        rule.get("annotations", {}).pop("description", None)
    (folder / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    for test in HERE.glob("*.test.yaml"):
        shutil.copy(test, folder / test.name)
    return folder


def test_promtool_accepts_the_rendered_rules(workdir: Path) -> None:
    result = subprocess.run(
        [promtool(), "check", "rules", "rules.yaml"],
        cwd=workdir, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_passes_its_promtool_unit_tests(workdir: Path) -> None:
    tests = sorted(p.name for p in workdir.glob("*.test.yaml"))
    result = subprocess.run(
        [promtool(), "test", "rules", *tests],
        cwd=workdir, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_test_where_it_fires_and_one_where_it_does_not(rendered: Obj) -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in HERE.glob("*.test.yaml"):
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    alerts = {r["alert"] for r in _rules(rendered)}
    assert alerts == firing
    assert alerts == quiet


def test_every_alert_description_names_a_section_of_docs_operations(rendered: Obj) -> None:
    sections = set(re.findall(r"^### (\S+)", OPERATIONS.read_text(), re.MULTILINE))
    for rule in _rules(rendered):
        (named,) = re.findall(r'docs/operations\.md, "([^"]+)"', rule["annotations"]["description"])
        assert named == rule["alert"]
        assert named in sections


def test_the_latency_thresholds_are_half_of_the_webhooks_timeouts() -> None:
    rule = _render(
        "--set=webhook.mutating.timeoutSeconds=7", "--set=webhook.validating.timeoutSeconds=3"
    )
    slow = {r["labels"]["webhook"]: r["expr"] for r in _rules(rule) if "webhook" in r["labels"]}
    assert slow["mutate"].endswith("> 3.5")
    assert slow["validate"].endswith("> 1.5")


def test_no_prometheus_rule_unless_enabled_or_outside_the_cluster() -> None:
    for values in (("--set=prometheusRule.enabled=false",), ("--set=webhook.url=https://x",)):
        result = subprocess.run(
            [k8s_tool("helm"), "template", "dra-webhook", str(CHART), *values],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "kind: PrometheusRule" not in result.stdout


class _Transport:
    connections = 0

    @property
    def refused(self) -> dict[str, int]:
        return {"queue": 1}


def _exported(tmp_path: Path) -> dict[str, frozenset[str]]:
    """The sample names /metrics can show, with every collector registered and fed once, and
    their labels."""
    from app.certs import TLS_CERT, mint

    metrics = Metrics()
    stats = SourceStats()
    stats.kinds[Kind.NAMESPACE].events["ADDED"] = 1
    metrics.watch_source(stats)
    metrics.watch_certificate(mint(tmp_path).directory / TLS_CERT)
    metrics.observe_review("mutate", "Pod", "allowed", 0.001)
    metrics.count_denial("validate", "dra-only")
    metrics.count_check_error("validate", "dra-only")
    metrics.bad_requests.inc()
    metrics.ready.set(1)
    metrics.cluster_stale.labels("Namespace").set(0)

    metrics.watch_transport(_Transport())
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return {name: frozenset(labels) for name, labels in found.items()}


def test_the_rules_use_only_metric_names_the_webhook_exports(rendered: Obj, tmp_path: Path) -> None:
    exported = _exported(tmp_path)
    used = {
        name
        for rule in _rules(rendered)
        for name in re.findall(r"\b(dra_webhook_[a-z_]+)\b", rule["expr"])
    }
    assert used
    assert used <= exported.keys(), used - exported.keys()


SCRAPE_LABELS = frozenset(
    {"job", "instance", "namespace", "endpoint", "pod", "service", "container"}
)
"""What Prometheus and the chart's ServiceMonitor put on every scraped series."""


def test_the_rules_select_only_labels_the_scraped_series_carry(
    rendered: Obj, tmp_path: Path
) -> None:
    """A label of the webhook's named like a scrape's arrives as exported_<name>: a rule that
    selects it as /metrics shows it never matches. DraWebhookSlowAdmissions once selected
    endpoint="mutate" while the ServiceMonitor's `endpoint` (the port it scrapes) replaced it."""
    exported = _exported(tmp_path)
    problems = []
    for rule in _rules(rendered):
        for metric, matchers in re.findall(r"\b(dra_webhook_[a-z_]+)\{([^}]*)\}", rule["expr"]):
            selected = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
            own = exported[metric] - SCRAPE_LABELS
            problems += [
                f"{rule['alert']}: {metric}{{{label}}}"
                for label in sorted(selected - own - {"job", "namespace"})
            ]
    assert problems == []


def test_alerts_without_a_scrape_job_are_refused_rather_than_firing_forever() -> None:
    """DraWebhookDown is absent(up{job=...}): with no ServiceMonitor and no job named, no scrape
    would match and it would fire from the first minute."""
    result = subprocess.run(
        [k8s_tool("helm"), "template", "dra-webhook", str(CHART), "-n", "dra-webhook",
         "--show-only=templates/prometheusrule.yaml", "--set=prometheusRule.enabled=true"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    assert "prometheusRule.enabled needs serviceMonitor.enabled, or prometheusRule.job" in (
        result.stderr
    )
    rule = _render("--set=serviceMonitor.enabled=false", "--set=prometheusRule.job=pods")
    (down,) = [
        r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == "DraWebhookDown"
    ]
    assert 'job="pods"' in down["expr"]
