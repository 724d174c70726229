"""`check`, `migrate` and `report` on typos of legacy names, GPU requests in YAML without a
kind (Helm values), and a NodePool's GPU cap: each named with its path, never passed in
silence, never a cap denied as a request."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main

TYPOS = ("nvidia.con/gpu", "nvidia.com/GPU", "nvidia.com/gpus")
POD = """apiVersion: v1
kind: Pod
metadata: {name: typo, namespace: gpu-e2e}
spec:
  containers:
  - name: a
    image: x
    resources:
      limits: {%s: 1, memory: 1Gi, hugepages-2Mi: 1Gi, example.com/foo: 1}
"""
VALUES = """# optimum-habana's and JupyterHub's shapes
resources:
  limits:
    habana.ai/gaudi: &hpus "8"
  requests:
    habana.ai/gaudi: *hpus
singleuser:
  profileList:
  - kubespawner_override:
      extra_resource_limits: {nvidia.com/gpu: "1"}
"""
NODEPOOL = """apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu, namespace: gpu-e2e}
spec:
  limits: {cpu: 1000, nvidia.com/gpu: 16}
"""
VALUES_PATHS = (
    "resources.limits[habana.ai/gaudi]: habana.ai/gaudi: 8",
    "resources.requests[habana.ai/gaudi]: habana.ai/gaudi: 8",
    "singleuser.profileList[0].kubespawner_override.extra_resource_limits[nvidia.com/gpu]: "
    "nvidia.com/gpu: 1",
)


@pytest.mark.parametrize("name", TYPOS)
def test_each_command_names_a_typo_with_did_you_mean(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "pod.yaml"
    file.write_text(POD % name)
    hint = f"limits[{name}]: {name}: 1: did you mean nvidia.com/gpu?"
    assert main(["check", str(file)]) == 0
    out = capsys.readouterr().out
    assert hint in out
    assert out.count("did you mean") == 1  # memory, hugepages, example.com/foo: no alarm
    assert main(["migrate", str(file)]) == 2
    assert f"migrate: not translated: {file}#0 (Pod gpu-e2e/typo): spec.containers[0]" in (
        capsys.readouterr().err
    )
    assert main(["report", str(file)]) == 0
    out = capsys.readouterr().out
    assert f"  near miss: Pod/typo: spec.containers[0].resources.{hint}" in out


def test_gpu_requests_in_yaml_without_a_kind_are_named_with_their_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "values.yaml"
    file.write_text(VALUES)
    assert main(["check", str(file)]) == 0
    out = capsys.readouterr().out
    for path in VALUES_PATHS:
        assert f"  warning: {path} (in YAML that is not a Kubernetes object" in out
    assert main(["migrate", str(file)]) == 2
    err = capsys.readouterr().err
    for path in VALUES_PATHS:
        assert f"migrate: not translated: {file}#0: {path} (" in err
    assert file.read_text() == VALUES


def test_yaml_without_a_kind_or_a_gpu_is_still_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "values.yaml"
    file.write_text("replicas: 2\nresources: {limits: {memory: 1Gi}}\n")
    assert main(["check", str(file)]) == 2
    assert "object 0 has no kind" in capsys.readouterr().err


def test_a_nodepool_gpu_cap_is_said_as_a_cap_and_never_denied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "nodepool.yaml"
    file.write_text(NODEPOOL)
    assert main(["check", str(file)]) == 0  # gpu-e2e is dra-only in the demo cluster
    out = capsys.readouterr().out
    assert "NodePool gpu-e2e/gpu" in out and "allowed" in out
    assert "spec.limits[nvidia.com/gpu]: 16: a cap on what the NodePool provisions" in out
    assert main(["migrate", str(file)]) == 0
    assert "migrate: warning: " in capsys.readouterr().err
