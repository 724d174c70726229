"""Where each pod's GPUs come from (device plugin, DRA claim, DRA through a DeviceClass's
extendedResourceName) and which nodes still need a device plugin: app.offline.sources, through
the dump report, `report --nodes`, the PolicyReport annotation and the webhook's gauge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from app import offline
from app.cli import main
from app.cluster.progress import _counts
from app.config import load_policy
from app.k8s.policyreports import GPU_SOURCES
from tests.helpers import make_view, namespace

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
CLASS = "gpu.nvidia.com"
IMPLICIT = f"deviceclass.resource.kubernetes.io/{CLASS}"


def device_class(name: str = CLASS, extended: str | None = GPU) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def node(name: str, **allocatable: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "64", **allocatable}}}  # fmt: skip


def pod(
    name: str,
    limits: Obj | None = None,
    *,
    node_name: str | None = None,
    mapped: tuple[str, ...] = (),
    claims: bool = False,
    phase: str = "Running",
    ns: str = "ml",
) -> Obj:
    container: Obj = {"name": "main", "image": "cuda:12"}
    if limits:
        container["resources"] = {"limits": limits}
    spec: Obj = {"containers": [container]}
    if node_name:
        spec["nodeName"] = node_name
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
    status: Obj = {"phase": phase}
    if mapped:
        status["extendedResourceClaimStatus"] = {
            "resourceClaimName": f"{name}-extended-resources-abcde",
            "requestMappings": [
                {"containerName": "main", "resourceName": r, "requestName": "container-0-request-0"}
                for r in mapped
            ],
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": spec, "status": status}  # fmt: skip


CLUSTER = [namespace("ml", "audit"), device_class()]
OBJECTS = [
    node("gpu-1", **{GPU: "8"}),
    node("gpu-2", **{GPU: "8"}),
    node("dra-1"),
    pod("plugin", {GPU: 2}, node_name="gpu-1"),
    pod("done", {GPU: 2}, node_name="gpu-2", phase="Succeeded"),
    pod("scheduler", {GPU: 1}, node_name="dra-1", mapped=(GPU,)),
    pod("implicit", {IMPLICIT: 1}, node_name="dra-1", mapped=(IMPLICIT,)),
    pod("claimed", node_name="dra-1", claims=True),
    pod("waiting", {GPU: 1}),
    pod("cpu", {"cpu": 1}, node_name="gpu-1"),
]


def _sources() -> tuple[offline.Sources, list[offline.NamespaceReport]]:
    view = make_view(CLUSTER)
    sources = offline.sources_for(load_policy(), view)
    rows = offline.report(
        load_policy(), view, [(f"d#{i}", o) for i, o in enumerate(OBJECTS)], sources=sources
    )
    return sources, rows


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("plugin", {"device-plugin"}),
        ("done", {"device-plugin"}),
        ("scheduler", {"dra-extended-resource"}),
        ("implicit", {"dra-extended-resource"}),
        ("claimed", {"dra-claim"}),
        ("waiting", {"unscheduled"}),
        ("cpu", set()),
    ],
)
def test_each_pod_is_classified_by_how_its_gpus_are_served(name: str, expected: set[str]) -> None:
    sources = offline.sources_for(load_policy(), make_view(CLUSTER))
    (obj,) = [o for o in OBJECTS if o["metadata"]["name"] == name]
    assert sources.classify(obj).sources == expected


def test_a_pod_served_both_ways_counts_in_both() -> None:
    sources = offline.sources_for(load_policy(), make_view(CLUSTER))
    both = pod("both", {GPU: 1, "nvidia.com/mig-1g.10gb": 1}, node_name="gpu-1", mapped=(GPU,))
    found = sources.classify(both)
    assert found.sources == {"dra-extended-resource", "device-plugin"}
    assert found.device_plugin == ("nvidia.com/mig-1g.10gb",)
    assert found.extended == ((GPU, CLASS),)


def test_the_namespace_counts_and_the_node_lines() -> None:
    sources, rows = _sources()
    (row,) = rows
    assert row.gpu_pods == {
        "device-plugin": 2, "dra-claim": 1, "dra-extended-resource": 2, "unscheduled": 1
    }  # fmt: skip
    assert list(sources.node_lines()) == [
        "node gpu-1: device plugin serves nvidia.com/gpu (8) to 1 running pod "
        "(nvidia.com/gpu: ml/plugin)",
        "node gpu-2: device plugin serves nvidia.com/gpu (8) to 0 running pods: its device "
        "plugin can be removed",
    ]
    assert list(sources.name_lines()) == [
        "nvidia.com/gpu: 1 pod served by DRA through DeviceClass gpu.nvidia.com "
        "(extendedResourceName); 1 by a device plugin on 1 node (gpu-1)"
    ]


def test_no_node_needs_a_device_plugin_once_none_serves_a_pod() -> None:
    sources = offline.sources_for(load_policy(), make_view(CLUSTER))
    for obj in (node("gpu-2", **{GPU: "8"}), node("dra-1"), OBJECTS[4], OBJECTS[5]):
        (sources.add_node if obj["kind"] == "Node" else sources.add_pod)(obj)
    assert list(sources.name_lines()) == [
        "nvidia.com/gpu: 1 pod served by DRA through DeviceClass gpu.nvidia.com "
        "(extendedResourceName); no node needs a device plugin for it"
    ]
    assert [r["removable"] for r in sources.rows()] == [True]


def test_report_prints_the_sources_and_nodes_gives_json_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, dump = tmp_path / "cluster.yaml", tmp_path / "dump.yaml"
    cluster.write_text(yaml.safe_dump_all(CLUSTER))
    dump.write_text(yaml.safe_dump_all(OBJECTS))
    args = ["report", "--cluster-file", str(cluster), str(dump)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "  gpu pods: 2 device-plugin, 1 dra-claim, 2 dra-extended-resource, 1 unscheduled" in out
    assert "node gpu-2: device plugin serves nvidia.com/gpu (8) to 0 running pods" in out
    assert main([*args, "--nodes", "--output", "json"]) == 0
    rows = orjson.loads(capsys.readouterr().out)
    assert rows == [
        {"node": "gpu-1", "devicePlugin": {GPU: {"allocatable": "8", "runningPods": 1}},
         "removable": False},
        {"node": "gpu-2", "devicePlugin": {GPU: {"allocatable": "8", "runningPods": 0}},
         "removable": True},
    ]  # fmt: skip


def test_without_nodes_the_nodes_view_says_what_the_dump_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "dump.yaml"
    dump.write_text(yaml.safe_dump_all(OBJECTS[3:]))
    assert main(["report", "--nodes", str(dump)]) == 0
    out = capsys.readouterr().out
    assert "kubectl get nodes -o json" in out
    assert "through DeviceClass <not in the cluster view>" in out  # no --cluster-file classes


@given(st.text(max_size=60))
def test_the_gauge_reads_only_its_own_sources_from_the_annotation(text: str) -> None:
    for source, count in _counts(text):
        assert source in GPU_SOURCES and count >= 0
    assert _counts("device-plugin=3,dra-claim=2,evil=9,unscheduled=x") == [
        ("device-plugin", 3), ("dra-claim", 2)
    ]  # fmt: skip
