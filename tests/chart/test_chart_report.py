"""The chart's report CronJob, its role, and the webhook's gauge of the report's PolicyReports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.chart.helpers import CHART, NAMESPACE, of_kind, render
from tests.cluster.helpers import REPORT_ROLE, documented_grants

REPORT_VALUES = CHART / "ci" / "report-values.yaml"
DEFAULT_VALUES = CHART / "ci" / "default-values.yaml"
Obj = dict[str, Any]


def _grants(role: Obj) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _named(docs: tuple[Obj, ...], kind: str, suffix: str) -> Obj:
    (found,) = [d for d in of_kind(docs, kind) if d["metadata"]["name"].endswith(suffix)]
    return found


def test_the_report_role_is_the_one_docs_rbac_md_checks_against_the_report() -> None:
    docs = render("-f", str(REPORT_VALUES))
    assert _grants(_named(docs, "ClusterRole", "-report")) == documented_grants(REPORT_ROLE)


def test_without_policy_reports_the_report_role_cannot_write_them(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"report": {"enabled": True, "policyReports": False}}))
    docs = render("-f", str(values))
    assert all(g != "wgpolicyk8s.io" for g, _, _ in _grants(_named(docs, "ClusterRole", "-report")))
    (cronjob,) = of_kind(docs, "CronJob")
    args = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--policy-reports" not in args
    webhook_role = _named(docs, "ClusterRole", "dra-webhook")
    assert all(g != "wgpolicyk8s.io" for g, _, _ in _grants(webhook_role))


def test_the_cronjob_runs_the_live_report_under_its_own_service_account() -> None:
    docs = render("-f", str(REPORT_VALUES))
    (cronjob,) = of_kind(docs, "CronJob")
    job = cronjob["spec"]["jobTemplate"]["spec"]
    pod = job["template"]["spec"]
    (container,) = pod["containers"]
    assert cronjob["spec"]["schedule"] == "17 * * * *"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert container["command"] == ["dra-webhook"]
    assert container["args"] == [
        "report",
        "--in-cluster",
        "--config=/etc/dra-webhook/policy.yaml",
        "--page-size=500",
        "--policy-reports",
    ]
    account = _named(docs, "ServiceAccount", "-report")["metadata"]["name"]
    assert pod["serviceAccountName"] == account
    binding = _named(docs, "ClusterRoleBinding", "-report")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["resources"]["limits"]["memory"] == "256Mi"


def test_the_webhook_lists_policy_reports_only_when_its_gauge_reads_them() -> None:
    with_gauge = render("-f", str(REPORT_VALUES))
    role = _named(with_gauge, "ClusterRole", "dra-webhook")
    extra = _grants(role) - _grants(
        _named(render("-f", str(DEFAULT_VALUES)), "ClusterRole", "dra-webhook")
    )
    assert extra == {("wgpolicyk8s.io", "policyreports", "list")}
    (deployment,) = of_kind(with_gauge, "Deployment")
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["DRA_WEBHOOK_MIGRATION_GAUGE_INTERVAL_SECONDS"] == "300"
    (default,) = of_kind(render("-f", str(DEFAULT_VALUES)), "Deployment")
    env = {
        e["name"]: e.get("value")
        for e in default["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["DRA_WEBHOOK_MIGRATION_GAUGE_INTERVAL_SECONDS"] == "0"
    assert of_kind(render("-f", str(DEFAULT_VALUES)), "CronJob") == []
