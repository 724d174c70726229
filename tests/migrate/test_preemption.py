"""`migrate` says, as admission does, what a workload whose pods may preempt loses on claims: the
scheduler evicts lower-priority pods for device-plugin GPUs, not for DRA devices
(app.policies.preemption). The classes come from the policy's `preemption.priorityClasses` or
the cluster file's PriorityClasses; a release that preempts for DRA is told nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from app.cluster import release
from tests.assets import k8s_tool
from tests.migrate.helpers import Run

LOSES = "may evict lower-priority pods for nvidia.com/gpu today; migrated to DRA claims it will not"

POLICY = """
preemption:
  priorityClasses:
    - {name: inference-high, value: 100000}
    - {name: batch-low, value: 100, preemptionPolicy: Never}
"""


def _deployment(name: str, priority_class: str | None, gpus: int = 1) -> str:
    named = f"      priorityClassName: {priority_class}\n" if priority_class else ""
    return (
        f"apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: ml}}\n"
        f"spec:\n  replicas: 2\n  template:\n    spec:\n{named}      containers:\n"
        f"      - name: serve\n        image: x\n        resources:\n          limits:\n"
        f"            nvidia.com/gpu: {gpus}\n"
    )


def _priority_class(name: str, value: int, **fields: object) -> dict[str, object]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **fields,
    }


def _warnings(run: Run) -> list[str]:
    return [line for line in run.stderr.splitlines() if LOSES in line]


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


def test_a_workload_naming_a_class_the_policy_says_preempts_is_warned_with_file_and_field(
    tmp_path: Path, migrate: Callable[..., Run], policy: Path
) -> None:
    (tmp_path / "infer.yaml").write_text(_deployment("infer", "inference-high"))
    run = migrate("--diff", "--config", str(policy), "--kubernetes-version", "1.36", "infer.yaml")
    assert run.code == 1  # a warning leaves the exit code alone
    assert run.stderr.splitlines() == [
        "migrate: warning: infer.yaml#0 (Deployment ml/infer): "
        "spec.template.spec.priorityClassName: the pods of Deployment infer (priority 100000, "
        f"class inference-high) {LOSES}: Kubernetes 1.36 does not preempt for DRA devices, it "
        "waits until one frees up"
    ]
    assert "resourceClaimTemplateName" in run.stdout  # migrated all the same


def test_the_classes_of_the_cluster_file_are_known_and_its_global_default_too(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump_all(
            [
                _priority_class("serving", 5000),
                _priority_class("everyone", 10, globalDefault=True),
            ]
        )
    )
    (tmp_path / "a.yaml").write_text(
        _deployment("named", "serving") + "---\n" + _deployment("unnamed", None)
    )
    run = migrate("--diff", "--cluster-file", str(cluster), "a.yaml")
    named, unnamed = _warnings(run)
    assert named.startswith(
        "migrate: warning: a.yaml#0 (Deployment ml/named): spec.template.spec.priorityClassName: "
        "the pods of Deployment named (priority 5000, class serving) may evict"
    )
    # no priorityClassName: the global default class, named at the template
    assert unnamed.startswith(
        "migrate: warning: a.yaml#1 (Deployment ml/unnamed): spec.template.spec: the pods of "
        "Deployment unnamed (priority 10, class everyone) may evict"
    )


@pytest.mark.parametrize(
    "priority_class",
    [
        pytest.param("batch-low", id="preemptionPolicy Never"),
        pytest.param("nobody-knows", id="a class neither the policy nor the cluster file has"),
        pytest.param(None, id="no class and no global default: priority 0"),
    ],
)
def test_a_workload_that_may_not_preempt_is_migrated_without_a_word(
    tmp_path: Path, migrate: Callable[..., Run], policy: Path, priority_class: str | None
) -> None:
    (tmp_path / "a.yaml").write_text(_deployment("a", priority_class))
    run = migrate("--diff", "--config", str(policy), "a.yaml")
    assert run.code == 1 and run.stderr == ""


def test_a_release_whose_scheduler_preempts_for_dra_is_told_nothing(
    tmp_path: Path, migrate: Callable[..., Run], policy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(release, "PREEMPTS_FOR_DRA", frozenset({37}))
    (tmp_path / "a.yaml").write_text(_deployment("a", "inference-high"))
    before = migrate("--diff", "--config", str(policy), "--kubernetes-version", "1.36", "a.yaml")
    assert len(_warnings(before)) == 1
    after = migrate("--diff", "--config", str(policy), "--kubernetes-version", "1.37", "a.yaml")
    assert after.code == 1 and after.stderr == ""


def test_preemption_warn_false_says_nothing(tmp_path: Path, migrate: Callable[..., Run]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY + "  warn: false\n")
    (tmp_path / "a.yaml").write_text(_deployment("a", "inference-high"))
    assert migrate("--diff", "--config", str(policy), "a.yaml").stderr == ""


def test_it_is_said_on_the_run_that_migrates_and_not_again(
    tmp_path: Path, migrate: Callable[..., Run], policy: Path
) -> None:
    (tmp_path / "a.yaml").write_text(_deployment("a", "inference-high"))
    written = migrate("--write", "--config", str(policy), "a.yaml")
    assert written.code == 0 and len(_warnings(written)) == 1
    again = migrate("--diff", "--config", str(policy), "a.yaml")
    assert again.code == 0 and again.stderr == ""  # no legacy name left: nothing migrated


def test_list_items_and_json_name_their_path_within_the_document(
    tmp_path: Path, migrate: Callable[..., Run], policy: Path
) -> None:
    item = yaml.safe_load(_deployment("listed", "inference-high"))
    listed = {"apiVersion": "v1", "kind": "List", "items": [item]}
    (tmp_path / "list.yaml").write_text(yaml.safe_dump(listed))
    (tmp_path / "one.json").write_text(
        json.dumps(yaml.safe_load(_deployment("json", "inference-high")))
    )
    run = migrate("--diff", "--config", str(policy), "list.yaml", "one.json")
    assert [w.split(": the pods")[0] for w in _warnings(run)] == [
        "migrate: warning: list.yaml#0 (Deployment ml/listed): "
        "items[0].spec.template.spec.priorityClassName",
        "migrate: warning: one.json#0 (Deployment ml/json): spec.template.spec.priorityClassName",
    ]


def test_an_overlays_patched_workload_is_warned_about_too(
    tmp_path: Path, migrate: Callable[..., Run], policy: Path
) -> None:
    kubectl = k8s_tool("kubectl")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources: [deployment.yaml]\n")
    (overlay / "deployment.yaml").write_text(_deployment("infer", "inference-high"))
    run = migrate("--config", str(policy), "--kubectl", kubectl, "overlay")
    (line,) = _warnings(run)
    assert line.startswith(
        "migrate: warning: overlay (rendered)#0 (Deployment ml/infer): "
        "spec.template.spec.priorityClassName: the pods of Deployment infer"
    )
