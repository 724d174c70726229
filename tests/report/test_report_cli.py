"""`dra-webhook report --kubeconfig`: counts from the live cluster, PolicyReports, errors."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.cli import main
from app.k8s.policyreports import REPORT_NAME
from app.report.progress import Progress
from tests.report.fake_cluster import FakeCluster, pod

Obj = dict[str, Any]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def rows(out: str) -> dict[str, Obj]:
    return {row["namespace"]: row for row in orjson.loads(out)}


def test_workloads_are_counted_once_with_their_pods_and_replica_sets_under_them(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "report", "--kubeconfig", str(kubeconfig), "--output", "json")
    assert code == 0, err
    found = rows(out)
    assert found["serve"]["objects"] == 1  # the Deployment; its ReplicaSet and pods under it
    assert found["serve"]["legacy_objects"] == ["Deployment/api"]
    assert found["serve"]["mode"] == "audit"
    assert found["lab"]["objects"] == 2  # the CronJob (Job and pod under it), the loose ReplicaSet
    assert found["lab"]["legacy_objects"] == ["CronJob/nightly"]
    assert found["lab"]["unmapped"] == ["habana.ai/gaudi"]
    # bare pods, and a pod whose owner is not a listed workload (a Node's mirror pod), count
    assert found["train"]["objects"] == 3
    assert found["train"]["legacy_objects"] == ["Pod/bare"]
    assert found["kube-system"]["mode"] == "-"
    assert found["empty"] == {**found["empty"], "objects": 0, "legacy_objects": []}
    assert "6 counted under their owner" in err  # 1 ReplicaSet, 1 Job, 4 pods


def test_the_text_table_is_the_dump_reports(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "report", "--kubeconfig", str(kubeconfig))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "MODE", "PODSPECS", "LEGACY", "READY", "RESOURCES"]
    assert any(line.split()[:5] == ["train", "dra-only", "3", "1", "no"] for line in lines)
    # the release, and (the report's role writes no probe template) its defaults
    assert lines[-1].startswith("Kubernetes v1.36.2 (release defaults): resource.k8s.io")
    assert "DRAConsumableCapacity on" in lines[-1]


def test_policy_reports_one_per_namespace_created_then_updated_in_place(
    cluster: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "report", "--kubeconfig", str(kubeconfig), "--policy-reports")
    assert code == 0, err
    assert "5 PolicyReports written" in err
    assert {ns for ns, _ in cluster.reports} == {"kube-system", "train", "serve", "lab", "empty"}
    assert {name for _, name in cluster.reports} == {REPORT_NAME}
    train = cluster.reports[("train", REPORT_NAME)]
    assert train["summary"] == {"pass": 2, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    (result,) = train["results"]
    assert result["result"] == "fail" and result["severity"] == "high"
    assert result["resources"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "bare",
            "namespace": "train",
            "uid": "uid-train-bare",
        }
    ]
    assert "DeviceClass gpu.nvidia.com" in result["message"]
    serve = cluster.reports[("serve", REPORT_NAME)]
    assert serve["summary"]["warn"] == 1 and serve["results"][0]["severity"] == "medium"
    lab = cluster.reports[("lab", REPORT_NAME)]
    assert "habana.ai/gaudi: no DRA mapping yet" in lab["results"][0]["message"]
    assert lab["metadata"]["labels"]["dra-webhook/mode"] == "translate"
    uids = {key: r["metadata"]["uid"] for key, r in cluster.reports.items()}

    code, _, err = run(capsys, "report", "--kubeconfig", str(kubeconfig), "--policy-reports")
    assert code == 0, err
    assert {key: r["metadata"]["uid"] for key, r in cluster.reports.items()} == uids


def test_one_line_naming_verb_and_resource_when_rbac_forbids_a_list(
    cluster: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.forbid("list", "statefulsets")
    code, out, err = run(capsys, "report", "--kubeconfig", str(kubeconfig))
    assert code == 2
    assert out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("dra-webhook: report: not allowed to list statefulsets (apps API group)")
    assert "grant `list` on `statefulsets`" in line


def test_one_line_naming_the_write_when_rbac_forbids_policy_reports(
    cluster: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.forbid("patch", "policyreports")
    code, _, err = run(capsys, "report", "--kubeconfig", str(kubeconfig), "--policy-reports")
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "not allowed to patch policyreports (wgpolicyk8s.io API group)" in line


def test_without_list_on_nodes_the_report_stands_and_says_the_per_node_view_is_empty(
    cluster: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.forbid("list", "nodes")
    code, out, err = run(capsys, "report", "--kubeconfig", str(kubeconfig), "--output", "json")
    assert code == 0, err
    assert {row["namespace"] for row in orjson.loads(out)} >= {"train", "serve", "lab"}
    (note,) = [line for line in err.splitlines() if "Nodes not read" in line]
    assert "not allowed to list nodes" in note
    code, out, err = run(capsys, "report", "--kubeconfig", str(kubeconfig), "--nodes")
    assert code == 0 and "kubectl get nodes" in out


def test_a_namespace_being_deleted_is_skipped_with_a_note_and_the_others_reports_are_written(
    cluster: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.terminate("serve")
    code, _, err = run(capsys, "report", "--kubeconfig", str(kubeconfig), "--policy-reports")
    assert code == 0, err
    assert {ns for ns, _ in cluster.reports} == {"kube-system", "train", "lab", "empty"}
    notes = [line for line in err.splitlines() if "serve" in line]
    assert notes == [
        "dra-webhook: note: namespace serve is being deleted; its PolicyReport was not written"
    ]
    assert "grant" not in err
    assert "4 PolicyReports written" in err
    code, _, _ = run(
        capsys, "report", "--kubeconfig", str(kubeconfig), "--policy-reports", "--fail-on", "legacy"
    )
    assert code == 1  # the normal rules: serve's Deployment still asks for nvidia.com/gpu


def test_a_namespace_gone_before_its_report_is_written_is_skipped_with_a_note(
    cluster: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleted between the list of its pods and the write (a 404 from the API server's
    NamespaceLifecycle), it is not taken for a missing CRD."""
    cluster.remove("lab")
    code, _, err = run(capsys, "report", "--kubeconfig", str(kubeconfig), "--policy-reports")
    assert code == 0, err
    assert "CRD" not in err
    assert (
        "dra-webhook: note: namespace lab is being deleted; its PolicyReport was not written"
        in (err.splitlines())
    )
    assert {ns for ns, _ in cluster.reports} == {"kube-system", "train", "serve", "empty"}


def test_policy_reports_without_the_crd_say_to_install_it(
    cluster: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.without_crd()
    code, _, err = run(capsys, "report", "--kubeconfig", str(kubeconfig), "--policy-reports")
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "install the PolicyReport CRD" in line


def test_an_unreachable_api_server_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = FakeCluster()
    cluster.port = 1  # nothing listens there
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    code, _, err = run(capsys, "report", "--kubeconfig", str(kubeconfig))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "cannot reach the API server" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--policy-reports", "dump.json"), "--policy-reports needs --kubeconfig or --in-cluster"),
        ((), "name cluster dump files, or pass --kubeconfig or --in-cluster"),
        (("--kubeconfig", "k", "dump.json"), "drop the dump files"),
        (("--kubeconfig", "k", "--page-size", "0"), "--page-size must be at least 1"),
    ],
)
def test_flags_that_do_not_go_together_are_refused(
    args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "report", *args)
    assert code == 2
    assert message in err


def test_a_missing_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "report", "--kubeconfig", str(tmp_path / "absent"))
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "report: kubeconfig" in err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_is_drawn_on_a_terminal_only() -> None:
    piped = io.StringIO()
    Progress(piped).update("pods", 500, 1500)
    assert piped.getvalue() == ""
    tty = _Tty()
    progress = Progress(tty)
    progress.update("pods", 500, 1500)
    assert "pods" in tty.getvalue() and "500/2000" in tty.getvalue()
    assert "#" * 7 in tty.getvalue()
    progress.update("namespaces", 3, None)
    progress.done()
    assert tty.getvalue().endswith("\r\x1b[2K")


def test_in_cluster_outside_a_pod_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = run(capsys, "report", "--in-cluster")
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("dra-webhook: report: in-cluster service account:")


def test_operators_kinds_the_cluster_serves_are_listed_through_discovery_and_own_their_pods(
    cluster: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = {"spec": pod("train", "x", "nvidia.com/gpu")["spec"]}
    job = {
        "metadata": {"name": "bert", "namespace": "train", "uid": "uid-pytorchjob"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": template}}},
    }
    trainjob = {
        "metadata": {"name": "tune", "namespace": "train", "uid": "uid-trainjob"},
        "spec": {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}}}},
    }
    cluster.serve_kind("kubeflow.org", "PyTorchJob", "pytorchjobs", [job])
    cluster.serve_kind("trainer.kubeflow.org", "TrainJob", "trainjobs", [trainjob])
    owned = pod("train", "bert-worker-0", "nvidia.com/gpu", owner=("PyTorchJob", "bert"))
    count, make = cluster.collections["/api/v1/pods"]
    cluster.serve("/api/v1/pods", count + 1, lambda i: owned if i == count else make(i))

    code, out, err = run(capsys, "report", "--kubeconfig", str(kubeconfig), "--output", "json")

    assert code == 0, err
    train = rows(out)["train"]
    assert set(train["legacy_objects"]) == {"Pod/bare", "PyTorchJob/bert", "TrainJob/tune"}
    assert train["notRewritable"] == [
        "TrainJob/tune: spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: nvidia.com/gpu: 4 "
        "(TrainJob spec.trainer.resourcesPerNode is copied by the Trainer controller into the "
        "runtime's pod templates; request the devices through resourceClaims in the "
        "(Cluster)TrainingRuntime's JobSet template instead)"
    ]
    assert "7 counted under their owner" in err  # the PyTorchJob's pod too
    paths = [path for method, path, _ in cluster.requests if method == "GET"]
    assert "/apis/kubeflow.org/v1/pytorchjobs" in paths
    assert not any("rayclusters" in path for path in paths)  # not served: not listed
