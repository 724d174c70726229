"""Journey report: `dra-webhook report --kubeconfig --policy-reports` against the real API server.

2,000 pods in 50 namespaces (Pending for good: `schedulerName` names no scheduler), plus in each
namespace a Deployment (its ReplicaSet and pod are counted under it) and a suspended CronJob.
The namespaces carry their mode under a label of their own (`report-mode`, through the report's
policy file), so the registered webhook and admission policy never see them.

- the counts per namespace are right, owned objects counted under their owner;
- one PolicyReport per namespace (the upstream CRD, `crds/` of DRA_WEBHOOK_TEST_DATA), and a
  second run after some pods are gone updates each in place: the same uid, the new counts,
  never a second one;
- the report's peak RSS stays bounded (a page of objects at a time: docs/benchmarks.md);
- the chart's report ClusterRole is enough, and an identity without it gets one line naming the
  verb and resource to grant, and a non-zero exit;
- the chart's report CronJob and PrometheusRule pass the API server's server-side dry run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.assets import third_party
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import Kube
from tests.e2e.webhook import NAMESPACE, render, token_kubeconfig
from tests.report.peak import run_report

pytestmark = [pytest.mark.journey("report"), pytest.mark.slow]

Obj = dict[str, Any]
LABEL = "report-mode"
MODES = ("dra-only", "audit", "translate", None)
NAMESPACES = 50
PODS_PER_NAMESPACE = 40
RSS_BOUND_MIB = 110
"""Peak RSS allowed for the report over 2,000 pods in pages of 100; measured 85 MiB, of which
~80 MiB is the empty-cluster floor (Python and the imports; docs/benchmarks.md)."""
POLICY_REPORTS = "/apis/wgpolicyk8s.io/v1alpha2"


def _names() -> list[str]:
    return [f"report-{i:02d}" for i in range(NAMESPACES)]


def _mode(index: int) -> str | None:
    return MODES[index % len(MODES)]


def _legacy(pod: int) -> str | None:
    """The legacy resource pod number `pod` of a namespace asks for, if any."""
    if pod == 1:
        return "habana.ai/gaudi"  # a legacy name without a mapping in the policy
    return "nvidia.com/gpu" if pod % 4 == 0 else None


def _spec(resource: str | None) -> Obj:
    container: Obj = {"name": "main", "image": "registry.example/app:1"}
    if resource:
        container["resources"] = {"limits": {resource: "1"}}
    return {"schedulerName": "no-such-scheduler", "containers": [container]}


def _pod(namespace: str, number: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{number:03d}", "namespace": namespace},
        "spec": _spec(_legacy(number)),
    }


def _deployment(namespace: str) -> Obj:
    labels = {"app": "trainer"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": _spec("nvidia.com/gpu")},
        },
    }


def _cronjob(namespace: str) -> Obj:
    spec = {**_spec(None), "restartPolicy": "Never"}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": namespace},
        "spec": {
            "schedule": "0 3 * * *",
            "suspend": True,
            "jobTemplate": {"spec": {"template": {"spec": spec}}},
        },
    }


@pytest.fixture(scope="module")
def crds(kube: Kube) -> None:
    for path in sorted(third_party("crds").glob("*.yaml")):
        kube.install_crd(yaml.safe_load(path.read_text()))


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "policy.yaml"
    path.write_text(yaml.safe_dump({"namespaceModes": {"label": LABEL}}))
    return path


@pytest.fixture(scope="module")
def population(kube: Kube, crds: None) -> Iterator[list[str]]:
    """50 namespaces, 2,000 bare pods, a Deployment (one pod) and a CronJob in each."""
    names = _names()
    for index, name in enumerate(names):
        mode = _mode(index)
        kube.namespace(name, **({LABEL: mode} if mode else {}))
    objects = [_pod(ns, n) for ns in names for n in range(PODS_PER_NAMESPACE)]
    objects += [make(ns) for ns in names for make in (_deployment, _cronjob)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(kube.create, objects))
    kube.wait(
        lambda: len(kube.list("Pod", labelSelector="app=trainer")) >= NAMESPACES or None,
        "the Deployments' pods",
        timeout=120,
    )
    yield names
    for name in names:
        kube.delete("Namespace", name)


def _run(*args: str) -> tuple[int, str, str, int]:
    """`dra-webhook report`: exit code, stdout, stderr and its own peak RSS in KiB."""
    return run_report(*args)


def _ours(rows: list[Obj]) -> dict[str, Obj]:
    return {row["namespace"]: row for row in rows if row["namespace"].startswith("report-")}


def _policy_reports(kube: Kube, namespace: str) -> list[Obj]:
    answer = kube.http.get(f"{POLICY_REPORTS}/namespaces/{namespace}/policyreports")
    assert answer.status_code == 200, answer.text
    items: list[Obj] = answer.json()["items"]
    return items


def test_the_crds_are_the_upstream_files_named_in_their_readme() -> None:
    folder = third_party("crds")
    readme = (folder / "README.md").read_text()
    for path in sorted(folder.glob("*.yaml")):
        assert hashlib.sha256(path.read_bytes()).hexdigest() in readme, path.name


def test_report_counts_2000_pods_in_50_namespaces_and_writes_one_policy_report_each(
    control_plane: ControlPlane, kube: Kube, population: list[str], policy: Path
) -> None:
    admin = str(control_plane.kubeconfig())
    args = ("--kubeconfig", admin, "--config", str(policy), "--output", "json")
    code, out, err, rss = _run(*args, "--policy-reports", "--page-size", "100")
    assert code == 0, err
    rows = _ours(orjson.loads(out))
    assert set(rows) == set(population)
    legacy_pods = sum(1 for n in range(PODS_PER_NAMESPACE) if _legacy(n))
    for index, name in enumerate(population):
        row = rows[name]
        assert row["mode"] == (_mode(index) or "-")
        assert row["objects"] == PODS_PER_NAMESPACE + 2  # the ReplicaSet and its pod: not apart
        assert len(row["legacy_objects"]) == legacy_pods + 1
        assert "Deployment/trainer" in row["legacy_objects"]
        assert row["unmapped"] == ["habana.ai/gaudi"]
    assert "PolicyReports written" in err
    print(f"\nreport over {NAMESPACES * PODS_PER_NAMESPACE} pods: peak RSS {rss / 1024:.1f} MiB")
    assert rss < RSS_BOUND_MIB * 1024
    whole = _run(*args, "--page-size", "5000")[3]
    print(f"the same in one page of every pod: peak RSS {whole / 1024:.1f} MiB")
    assert rss < whole  # what paging saves: the objects are never all held at once

    first: dict[str, Obj] = {}
    for index, name in enumerate(population):
        (report,) = _policy_reports(kube, name)
        first[name] = report
        expected = "fail" if _mode(index) == "dra-only" else "warn"
        summary = report["summary"]
        assert summary["pass"] == PODS_PER_NAMESPACE + 2 - (legacy_pods + 1)
        assert summary[expected] == legacy_pods + 1
        assert {r["result"] for r in report["results"]} == {expected}
        assert report["metadata"]["labels"]["dra-webhook/mode"] == (_mode(index) or "none")
        deployment = next(r for r in report["results"] if r["resources"][0]["kind"] == "Deployment")
        assert "DeviceClass gpu.nvidia.com" in deployment["message"]
        gaudi = next(r for r in report["results"] if r["resources"][0]["name"] == "pod-001")
        assert "mappings" in gaudi["message"]  # the fix names the policy key to add

    # Some legacy pods go; the second run updates the same reports in place.
    changed = population[0]
    gone = [n for n in range(PODS_PER_NAMESPACE) if _legacy(n) == "nvidia.com/gpu"][:4]
    for number in gone:
        kube.delete("Pod", f"pod-{number:03d}", changed, now=True)
    kube.wait(
        lambda: len(kube.list("Pod", changed)) == PODS_PER_NAMESPACE + 1 - len(gone) or None,
        "pods deleted",
    )
    code, out, err, rss = _run(*args, "--policy-reports")
    assert code == 0, err
    print(f"second run, pages of 500: peak RSS {rss / 1024:.1f} MiB")
    assert len(_ours(orjson.loads(out))[changed]["legacy_objects"]) == legacy_pods + 1 - len(gone)
    for name in population:
        (report,) = _policy_reports(kube, name)
        assert report["metadata"]["uid"] == first[name]["metadata"]["uid"]
    (report,) = _policy_reports(kube, changed)
    assert report["summary"]["fail"] == legacy_pods + 1 - len(gone)
    assert report["metadata"]["resourceVersion"] != first[changed]["metadata"]["resourceVersion"]


def _apply_all(kube: Kube, docs: list[Obj]) -> None:
    for doc in docs:
        kube.apply(doc)


def test_the_charts_report_role_is_enough_and_a_missing_verb_is_named_in_one_line(
    control_plane: ControlPlane,
    kube: Kube,
    population: list[str],
    policy: Path,
    helm: str,
    tmp_path: Path,
) -> None:
    docs = render(helm, "--show-only=templates/report.yaml", "--set=report.enabled=true")
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    account = binding["subjects"][0]["name"]
    granted = token_kubeconfig(control_plane, kube, account, tmp_path)
    _apply_all(kube, [role, binding])
    code, _, err, _ = _run(
        "--kubeconfig", str(granted), "--config", str(policy), "--policy-reports"
    )
    assert code == 0, err

    nobody = token_kubeconfig(control_plane, kube, "report-nobody", tmp_path)
    code, out, err, _ = _run("--kubeconfig", str(nobody), "--config", str(policy))
    assert code != 0
    assert out == ""
    (line,) = err.strip().splitlines()
    assert "not allowed to list namespaces (core API group) cluster-wide" in line
    assert "grant `list` on `namespaces`" in line

    # Listing allowed, PolicyReports not: the write is named (create, for a first report).
    reader = {**role, "metadata": {"name": "report-reader"}}
    reader["rules"] = [r for r in role["rules"] if "wgpolicyk8s.io" not in r["apiGroups"]]
    bind = {
        **binding,
        "metadata": {"name": "report-reader"},
        "roleRef": {**binding["roleRef"], "name": "report-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "report-nobody", "namespace": NAMESPACE}],
    }
    _apply_all(kube, [reader, bind])
    kube.wait(
        lambda: _run("--kubeconfig", str(nobody), "--config", str(policy))[0] == 0 or None,
        "the reader binding to take effect",
    )
    code, _, err, _ = _run("--kubeconfig", str(nobody), "--config", str(policy), "--policy-reports")
    assert code != 0
    (line,) = err.strip().splitlines()
    assert "policyreports (wgpolicyk8s.io API group)" in line
    assert "not allowed to patch" in line or "not allowed to create" in line


def test_the_api_server_accepts_the_report_cronjob_and_the_prometheus_rule(
    kube: Kube, crds: None, helm: str
) -> None:
    docs = render(
        helm,
        "--show-only=templates/report.yaml",
        "--show-only=templates/prometheusrule.yaml",
        "--set=report.enabled=true",
        "--set=prometheusRule.enabled=true",
        "--set=serviceMonitor.enabled=true",
        "--set=webhook.url=",
    )
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "CronJob",
        "PrometheusRule",
        "ServiceAccount",
    ]
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for doc in docs:
        group_version = doc["apiVersion"]
        prefix = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
        plural = {
            "ClusterRole": "clusterroles",
            "ClusterRoleBinding": "clusterrolebindings",
            "CronJob": "cronjobs",
            "PrometheusRule": "prometheusrules",
            "ServiceAccount": "serviceaccounts",
        }[doc["kind"]]
        namespace = doc["metadata"].get("namespace")
        where = f"/namespaces/{namespace}" if namespace else ""
        answer = kube.http.post(
            f"{prefix}{where}/{plural}",
            json={
                **doc,
                "metadata": {**doc["metadata"], "name": "dry-run-" + doc["metadata"]["name"]},
            },
            params={"dryRun": "All", "fieldValidation": "Strict"},
        )
        assert answer.status_code == 201, f"{doc['kind']}: {answer.text}"
