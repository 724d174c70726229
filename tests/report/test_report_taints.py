"""The live `report`: the DeviceTaintRules in force (listed in the version discovery names), what
each evicts or keeps off, in the text, the JSON rows and the PolicyReports of the namespaces they
reach."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from app.cli import main
from app.report.policyreport import TAINT_RULE
from tests.policies import taint_objects as t
from tests.report.fake_cluster import FakeCluster

Obj = dict[str, Any]
RESOURCE = "/apis/resource.k8s.io/v1"


@pytest.fixture
def with_rules(cluster: FakeCluster) -> FakeCluster:
    objects = t.cluster()
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    claims = [o for o in objects if o["kind"] == "ResourceClaim"]
    cluster.serve(f"{RESOURCE}/resourceslices", len(slices), slices.__getitem__)
    cluster.serve(f"{RESOURCE}/resourceclaims", len(claims), claims.__getitem__)
    rules = [
        t.rule("drain-a", {"driver": t.DRIVER, "pool": "node-a"}),
        t.rule("look-b", {"pool": "node-b"}, "None"),
    ]
    cluster.serve_kind("resource.k8s.io", "DeviceTaintRule", "devicetaintrules", rules,
                       namespaced=False)  # fmt: skip
    return cluster


def test_the_rules_in_force_are_listed_with_what_they_evict(
    with_rules: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--kubeconfig", str(kubeconfig)]) == 0
    out = capsys.readouterr().out
    assert (
        "DeviceTaintRule drain-a (example.com/maintenance:NoExecute; driver gpu.example.com, pool "
        "node-a): would evict 3 pods in 1 namespace: ml-a (3: a-0, a-1, a-2)"
    ) in out
    assert "DeviceTaintRule look-b (example.com/maintenance:None; pool node-b): marks" in out
    assert "  device taint: DeviceTaintRule drain-a (example.com/maintenance:NoExecute) evicts" in (
        out
    )
    assert "DeviceTaintRule: v1" in out  # the release line: where the kind is served


def test_the_namespaces_reached_get_a_policy_report_result_naming_the_rule(
    with_rules: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--kubeconfig", str(kubeconfig), "--policy-reports"]) == 0
    capsys.readouterr()
    report = with_rules.reports[("ml-a", "dra-webhook-migration")]
    (result,) = [r for r in report["results"] if r["rule"] == TAINT_RULE]
    assert result["result"] == "warn" and result["severity"] == "high"
    assert result["resources"] == [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "name": "drain-a"}
    ]
    assert result["message"].endswith("evicts a-0, a-1, a-2")
    others = with_rules.reports[("ml-b", "dra-webhook-migration")]["results"]
    assert not [r for r in others if r["rule"] == TAINT_RULE]  # a None rule evicts nothing


def test_json_rows_carry_each_namespace_s_part(
    with_rules: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--kubeconfig", str(kubeconfig), "--output", "json"]) == 0
    captured = capsys.readouterr()
    rows = {row["namespace"]: row for row in orjson.loads(captured.out)}
    assert rows["ml-a"]["device_taints"] == [
        "DeviceTaintRule drain-a (example.com/maintenance:NoExecute) evicts a-0, a-1, a-2"
    ]
    assert "dra-webhook: note: DeviceTaintRule look-b (" in captured.err
