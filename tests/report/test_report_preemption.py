"""`report` names, per namespace, the GPU workloads whose pods may preempt today (PriorityClass,
how many pods) with the finding "relies on preemption, which DRA does not do"
(app.offline.preempting): over a dump, in the text and JSON output, in the live report's
PolicyReports (and the gauge of legacy workloads does not count them twice), and with the
PriorityClasses read from the cluster, or only the policy's where they cannot be listed."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app import offline
from app.cli import main
from app.cluster import release
from app.cluster.listing import Cluster, connect
from app.cluster.progress import MigrationProgress
from app.cluster.release import ServedRelease
from app.k8s.policyreports import PREEMPTING_ANNOTATION
from app.offline.preempting import FINDING, PreemptingWorkload
from app.report.policyreport import LEGACY_RULE, PREEMPTION_RULE, policy_report
from app.report.tally import Tally
from tests.helpers import make_view, namespace, policy_from
from tests.report.fake_cluster import FakeCluster, workload
from tests.report.helpers import Running, seed

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"


def priority_class(name: str, value: int, **fields: Any) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **fields,
    }


def gpu_workload(
    kind: str, name: str, priority_class: str | None, ns: str = "serve", **spec: Any
) -> Obj:
    """A Pod or an apps/v1 workload whose pods ask for one device-plugin GPU."""
    obj = workload(kind, ns, name, GPU)
    if kind == "Pod":
        obj = {**obj, "spec": obj["spec"]["template"]["spec"]}
    obj.update(apiVersion="v1" if kind == "Pod" else "apps/v1", kind=kind)
    pod_spec = obj["spec"] if kind == "Pod" else obj["spec"]["template"]["spec"]
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    obj["spec"].update(spec)
    return obj


CLASSES = [
    priority_class("inference-high", 100_000),
    priority_class("batch-low", 100),
    priority_class("polite", 50_000, preemptionPolicy="Never"),
]
NAMESPACES = [namespace("serve", "audit"), namespace("train", "dra-only")]
OBJECTS = [
    gpu_workload("Deployment", "infer", "inference-high", replicas=3),
    gpu_workload("DaemonSet", "probe", "batch-low"),
    gpu_workload("Deployment", "polite", "polite", replicas=2),  # never preempts
    gpu_workload("Deployment", "plain", None),  # priority 0: outranks no one
    gpu_workload("Deployment", "stranger", "nobody-knows"),  # a class not known
    gpu_workload("Pod", "bare", None, ns="train", priority=100_000),  # as admitted
]


def _report(
    policy: str = "{}", view_objects: list[Obj] | None = None
) -> dict[str, offline.NamespaceReport]:
    """The dump report of OBJECTS, the view holding the namespaces and `view_objects` (by
    default the PriorityClasses CLASSES)."""
    view = make_view([*NAMESPACES, *(CLASSES if view_objects is None else view_objects)])
    rows = offline.report(policy_from(policy), view, [(f"d#{i}", o) for i, o in enumerate(OBJECTS)])
    return {row.namespace: row for row in rows}


def test_a_dump_names_each_gpu_workload_that_may_preempt_with_its_class_and_pods() -> None:
    rows = _report()
    assert rows["serve"].preempting == [
        PreemptingWorkload("Deployment/infer", "inference-high", 100_000, 3, False, (GPU,)),
        PreemptingWorkload("DaemonSet/probe", "batch-low", 100, None, True, (GPU,)),
    ]
    # a Pod carries its own priority (the Priority admission plugin set it)
    assert rows["train"].preempting == [
        PreemptingWorkload("Pod/bare", "", 100_000, 1, False, (GPU,))
    ]
    assert rows["serve"].preempting[0].describe() == (
        "Deployment/infer: 3 pods at priority 100000 (class inference-high) may evict "
        f"lower-priority pods for nvidia.com/gpu today: {FINDING}"
    )
    assert rows["serve"].preempting[1].pods_text() == "one pod per node"


def test_readiness_is_what_dra_only_admits_and_the_finding_sits_beside_it() -> None:
    rows = _report()
    assert not rows["serve"].ready_for_dra_only  # its legacy requests, as before
    excepting = """
exceptions:
  - name: keep-inference
    namespaceSelector: {matchLabels: {gpu-mode: audit}}
    kinds: [Deployment, DaemonSet]
    until: 2099-01-01
    reason: stays on the device plugin, which preempts
"""
    kept = _report(excepting)["serve"]
    assert kept.preempting == []  # kept on the device plugin, it keeps preemption


def test_the_policys_priority_classes_are_known_where_the_cluster_has_none() -> None:
    policy = "preemption: {priorityClasses: [{name: inference-high, value: 1000}]}"
    (found,) = _report(policy, view_objects=[])["serve"].preempting
    assert (found.workload, found.priority) == ("Deployment/infer", 1000)
    # the cluster's class is taken over the policy's
    assert _report(policy)["serve"].preempting[0].priority == 100_000


def test_the_global_default_class_is_the_class_of_a_template_that_names_none() -> None:
    classes = [*CLASSES, priority_class("everyone", 10, globalDefault=True)]
    found = {p.workload: p for p in _report(view_objects=classes)["serve"].preempting}
    assert found["Deployment/plain"].priority_class == "everyone"


def test_nothing_is_found_with_preemption_warn_false_or_where_the_release_preempts_for_dra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert all(r.preempting == [] for r in _report("preemption: {warn: false}").values())
    monkeypatch.setattr(release, "PREEMPTS_FOR_DRA", frozenset({36}))
    view = make_view([*NAMESPACES, *CLASSES])
    view.set_release(ServedRelease.from_defaults("1.36"))
    rows = offline.report(policy_from("{}"), view, [("d", o) for o in OBJECTS])
    assert all(r.preempting == [] for r in rows)
    view.set_release(ServedRelease.from_defaults("1.35"))
    rows = offline.report(policy_from("{}"), view, [("d", o) for o in OBJECTS])
    assert any(r.preempting for r in rows)


def test_the_text_and_json_output_carry_the_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "dump.yaml"
    dump.write_text(yaml.safe_dump_all([*NAMESPACES, *CLASSES, *OBJECTS]))
    assert main(["report", str(dump)]) == 0
    out = capsys.readouterr().out
    assert (
        "  preemption: Deployment/infer: 3 pods at priority 100000 (class inference-high) may "
        f"evict lower-priority pods for nvidia.com/gpu today: {FINDING}\n"
    ) in out
    assert "  preemption: DaemonSet/probe: one pod per node at priority 100" in out
    assert main(["report", str(dump), "--output", "json"]) == 0
    rows = {r["namespace"]: r for r in orjson.loads(capsys.readouterr().out)}
    assert rows["serve"]["preempting"][0] == {
        "workload": "Deployment/infer",
        "priority_class": "inference-high",
        "priority": 100_000,
        "pods": 3,
        "per_node": False,
        "resources": [GPU],
    }
    # a release named, which does not preempt for DRA either: said the same
    assert main(["report", str(dump), "--output", "json", "--kubernetes-version", "1.36"]) == 0
    assert orjson.loads(capsys.readouterr().out)[0]["preempting"]


def test_the_live_tally_writes_one_more_warn_result_and_the_gauge_counts_the_workload_once(
    tmp_path: Path,
) -> None:
    view = make_view([*NAMESPACES, *CLASSES])
    policy = policy_from("{}")
    tally = Tally(policy, view)
    for obj in OBJECTS:
        tally.add(obj)
    now = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)
    report = policy_report(tally.namespaces["serve"], policy.namespace_modes, lambda r: r, now)
    preempting = [r for r in report["results"] if r["rule"] == PREEMPTION_RULE]
    assert [r["resources"][0]["name"] for r in preempting] == ["infer", "probe"]
    infer = preempting[0]
    assert (infer["result"], infer["severity"]) == ("warn", "medium")
    assert infer["properties"] == {
        "mode": "audit",
        "resources": GPU,
        "priorityClass": "inference-high",
    }
    assert infer["message"].startswith("Deployment/infer: 3 pods at priority 100000")
    assert FINDING in infer["message"] and "docs/operations.md" in infer["message"]
    legacy = [r for r in report["results"] if r["rule"] == LEGACY_RULE]
    assert len(legacy) == 5  # every GPU workload of serve, preempting or not
    assert report["summary"]["warn"] == 7
    assert report["metadata"]["annotations"][PREEMPTING_ANNOTATION] == "2"

    # read back by the webhook's gauge: five workloads with a legacy request, not seven
    with Running() as cluster:
        cluster.reports[("serve", "r")] = report
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        assert asyncio.run(_gauge(kubeconfig)) == {("serve", "audit"): 5}


async def _gauge(kubeconfig: Path) -> dict[tuple[str, str], int]:
    progress = MigrationProgress(lambda: connect(kubeconfig), interval=1)
    client = Cluster(await connect(kubeconfig))
    try:
        await progress.read(client)
    finally:
        await client.close()
    return progress.counts


def _live(cluster: FakeCluster) -> None:
    """The seeded cluster with a high-priority inference Deployment in `serve`."""
    seed(cluster)
    high = priority_class("inference-high", 100_000)
    cluster.serve("/apis/scheduling.k8s.io/v1/priorityclasses", 1, [high].__getitem__)
    infer = workload("Deployment", "serve", "infer", GPU)
    infer["spec"]["replicas"] = 2
    infer["spec"]["template"]["spec"]["priorityClassName"] = "inference-high"
    cluster.serve("/apis/apps/v1/deployments", 1, [infer].__getitem__)


def test_the_live_report_reads_the_clusters_priority_classes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Running() as cluster:
        _live(cluster)
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        assert main(["report", "--kubeconfig", str(kubeconfig), "--output", "json"]) == 0
    captured = capsys.readouterr()
    rows = {r["namespace"]: r for r in orjson.loads(captured.out)}
    (found,) = rows["serve"]["preempting"]
    assert (found["workload"], found["priority"], found["pods"]) == ("Deployment/infer", 100_000, 2)
    assert "PriorityClasses not read" not in captured.err


def test_without_the_grant_on_priority_classes_the_live_report_says_so_and_uses_the_policys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("preemption: {priorityClasses: [{name: inference-high, value: 7}]}\n")
    with Running() as cluster:
        _live(cluster)
        cluster.forbid("list", "priorityclasses")
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        args = ["report", "--kubeconfig", str(kubeconfig), "--output", "json"]
        assert main([*args, "--config", str(policy)]) == 0
    captured = capsys.readouterr()
    rows = {r["namespace"]: r for r in orjson.loads(captured.out)}
    assert rows["serve"]["preempting"][0]["priority"] == 7
    (note,) = [line for line in captured.err.splitlines() if "PriorityClasses" in line]
    assert note.startswith(
        "dra-webhook: note: PriorityClasses not read, so only the policy's "
        "preemption.priorityClasses are known: report: not allowed to list priorityclasses "
        "(scheduling.k8s.io API group)"
    )
