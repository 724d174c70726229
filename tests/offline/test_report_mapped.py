"""`report` and names a DeviceClass maps: with `draOnly.mappedNames: allow` a namespace whose only
legacy requests are such names is ready for dra-only (the scheduler serves them from DRA), and
`--fail-on legacy` spares them; by default (deny) they are legacy like any other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from app import offline
from app.cli import main
from tests.helpers import make_view, namespace, policy_from

Obj = dict[str, Any]
ALLOW = "draOnly: {mappedNames: allow}\n"


def _class(name: str, extended: str | None) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def _pod(name: str, resource: str) -> Obj:
    container = {"name": "main", "image": "cuda", "resources": {"limits": {resource: 1}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"containers": [container]}}  # fmt: skip


CLUSTER = [namespace("ml", "audit"), _class("gpu.nvidia.com", "nvidia.com/gpu")]


@pytest.mark.parametrize(
    ("policy", "objects", "ready", "mapped"),
    [
        (ALLOW, [_pod("a", "nvidia.com/gpu")], True, {"Pod/a": "nvidia.com/gpu -> DeviceClass gpu.nvidia.com"}),
        ("{}", [_pod("a", "nvidia.com/gpu")], False, {}),
        (ALLOW, [_pod("a", "nvidia.com/gpu"), _pod("b", "amd.com/gpu")], False,
         {"Pod/a": "nvidia.com/gpu -> DeviceClass gpu.nvidia.com"}),
    ],
    ids=["allowed-mapped", "default-deny", "one-unmapped-name-left"],
)  # fmt: skip
def test_readiness_counts_mapped_names_only_where_dra_only_lets_them_through(
    policy: str, objects: list[Obj], ready: bool, mapped: dict[str, str]
) -> None:
    (row,) = offline.report(
        policy_from(policy), make_view(CLUSTER), [(f"d#{i}", o) for i, o in enumerate(objects)]
    )
    assert row.ready_for_dra_only is ready
    assert row.mapped == mapped


def test_fail_on_legacy_spares_mapped_names_the_policy_lets_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, cluster, dump = tmp_path / "p.yaml", tmp_path / "c.yaml", tmp_path / "d.yaml"
    cluster.write_text(yaml.safe_dump_all(CLUSTER))
    dump.write_text(yaml.safe_dump_all([_pod("a", "nvidia.com/gpu")]))
    args = ["report", "--cluster-file", str(cluster), "--fail-on", "legacy", str(dump)]
    policy.write_text(ALLOW)
    assert main([*args, "--config", str(policy)]) == 0
    assert "left to the scheduler: Pod/a: nvidia.com/gpu -> DeviceClass gpu.nvidia.com" in (
        capsys.readouterr().out
    )
    policy.write_text("{}")
    assert main([*args, "--config", str(policy)]) == 1
