"""`report` lists what the tenancy guards would refuse of what the cluster already holds: claims,
templates and pod specs using a DeviceClass outside the namespace's allow-list, and admin access
outside `adminAccess.namespaceSelector` (docs/tenancy.md), as the dump report, the text and JSON
output, the live report's tally and its PolicyReports."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app import offline
from app.cli import main
from app.report.policyreport import TENANCY_RULE, policy_report
from app.report.tally import Tally
from tests.claim_objects import claim, exact, first, sub, template, workload
from tests.helpers import make_view, namespace, policy_from

Obj = dict[str, Any]
GPU, H100 = "gpu.nvidia.com", "h100.nvidia.com"

POLICY = """
deviceClasses:
  - name: team-a
    namespaceSelector: {matchLabels: {team: a}}
    allowed: [gpu.nvidia.com]
  - name: team-w
    namespaceSelector: {matchLabels: {team: w}}
    allowed: [gpu.nvidia.com]
    action: warn
adminAccess:
  enabled: true
  users: [alice]
  namespaceSelector: {matchLabels: {tier: ops}}
"""

NAMESPACES = [
    namespace("a", "dra-only", team="a"),
    namespace("w", "dra-only", team="w"),
    namespace("free", "dra-only"),
    namespace("ops", "dra-only", tier="ops"),
]


def _generated(name: str, annotation: str) -> Obj:
    obj = claim(name, exact("g", H100), namespace="a")
    obj["metadata"]["annotations"] = {annotation: "x"}
    return obj


def _implicit_pod(name: str, resource: str, ns: str = "a") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "containers": [{"name": "main", "image": "x", "resources": {"limits": {resource: 1}}}]
        },
    }


OBJECTS: list[Obj] = [
    claim("allowed", exact("g", GPU), namespace="a"),
    claim("h100", exact("g", H100), namespace="a"),
    template("pick", first("g", sub("big", GPU), sub("bigger", H100)), namespace="a"),
    claim("audited", exact("g", H100), namespace="w"),
    claim("anything", exact("g", H100), namespace="free"),
    claim("admin", exact("g", GPU, adminAccess=True), namespace="free"),
    claim("admin-ops", exact("g", GPU, adminAccess=True), namespace="ops"),
    _generated("from-template", "resource.kubernetes.io/pod-claim-name"),
    _generated("extended", "resource.kubernetes.io/extended-resource-claim"),
    _implicit_pod("implicit", f"deviceclass.resource.kubernetes.io/{H100}"),
    workload("Deployment", "clean", templates=("pick",), namespace="free"),
]


def _report() -> dict[str, offline.NamespaceReport]:
    view = make_view(NAMESPACES)
    rows = offline.report(
        policy_from(POLICY), view, [(f"dump#{i}", o) for i, o in enumerate(OBJECTS)]
    )
    return {row.namespace: row for row in rows}


def test_the_dump_report_lists_each_use_the_guards_would_refuse_with_its_path() -> None:
    rows = _report()
    allowed = "gpu.nvidia.com (deviceClasses entry team-a)"
    assert rows["a"].tenancy == [
        f"ResourceClaim/h100: spec.devices.requests[0].exactly.deviceClassName: asks for "
        f"DeviceClass {H100}, which namespace a may not use (allowed: {allowed})",
        f"ResourceClaimTemplate/pick: spec.spec.devices.requests[0].firstAvailable[1]"
        f".deviceClassName: alternative bigger asks for DeviceClass {H100}, which namespace a "
        f"may not use (allowed: {allowed})",
        f"Pod/implicit: spec.containers[0].resources.limits[deviceclass.resource.kubernetes.io/"
        f"{H100}]: container main asks for deviceclass.resource.kubernetes.io/{H100}: 1, which "
        f"names DeviceClass {H100}, which namespace a may not use (allowed: {allowed})",
    ]
    (warned,) = rows["w"].tenancy
    assert warned.startswith("ResourceClaim/audited: ") and warned.endswith("(warn only)")
    (admin,) = rows["free"].tenancy
    assert admin.startswith(
        "ResourceClaim/admin: spec.devices.requests[0].exactly.adminAccess: asks for admin "
        "access to every device of DeviceClass gpu.nvidia.com, outside the namespaces"
    )
    assert rows["ops"].tenancy == []
    # claims made for a pod (from its template, or for its extended resources) are judged there
    assert not any("from-template" in t or "extended" in t for t in rows["a"].tenancy)


def test_a_policy_without_guards_lists_nothing() -> None:
    view = make_view(NAMESPACES)
    rows = offline.report(policy_from("{}"), view, [(f"d#{i}", o) for i, o in enumerate(OBJECTS)])
    assert all(row.tenancy == [] for row in rows)


def test_report_prints_them_and_json_carries_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, cluster, dump = tmp_path / "policy.yaml", tmp_path / "cluster.yaml", tmp_path / "d.yaml"
    policy.write_text(POLICY)
    cluster.write_text(yaml.safe_dump_all(NAMESPACES))
    dump.write_text(yaml.safe_dump_all(OBJECTS))
    args = ["report", "--config", str(policy), "--cluster-file", str(cluster), str(dump)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "  tenancy: ResourceClaim/h100: spec.devices.requests[0].exactly.deviceClassName" in out
    assert main([*args, "--output", "json"]) == 0
    rows = {r["namespace"]: r for r in orjson.loads(capsys.readouterr().out)}
    assert len(rows["a"]["tenancy"]) == 3 and len(rows["free"]["tenancy"]) == 1


def test_the_live_tally_makes_one_policy_report_result_per_object_fail_or_warn() -> None:
    view = make_view(NAMESPACES)
    tally = Tally(policy_from(POLICY), view)
    for obj in OBJECTS:
        tally.add(obj)
    modes = policy_from(POLICY).namespace_modes
    now = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
    a = policy_report(tally.namespaces["a"], modes, lambda r: r, now)
    results = [r for r in a["results"] if r["rule"] == TENANCY_RULE]
    assert [r["resources"][0]["name"] for r in results] == ["h100", "pick", "implicit"]
    assert {r["result"] for r in results} == {"fail"}
    assert a["summary"]["fail"] == 3
    w = policy_report(tally.namespaces["w"], modes, lambda r: r, now)
    assert [r["result"] for r in w["results"]] == ["warn"]
