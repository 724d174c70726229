"""Nodes in a static cluster file (`kubectl get nodes,... -o yaml`): kept as names and labels, and
the satisfiability check evaluates slices' nodeSelectors against them, as the live view's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.cluster.static import StaticSource
from app.cluster.view import ClusterView, Kind
from app.pipeline import Endpoint
from tests.claim_objects import claim, exact
from tests.cluster import objects
from tests.helpers import decide, namespace, write_cluster_file

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
RACK = "example.com/rack"


def test_a_static_files_nodes_are_kept_as_names_and_labels(tmp_path: Path) -> None:
    dumped = [objects.node(0, rack=3), objects.node(1, version=12), objects.namespace("default")]
    view = ClusterView()
    StaticSource(view, write_cluster_file(tmp_path / "cluster.yaml", dumped)).load()
    assert Kind.NODE in view.synced_kinds()
    held = view.get(Kind.NODE, "gpu-node-00000")
    assert held is not None
    assert set(held["metadata"]) == {"name", "labels", "uid"}
    assert held["metadata"]["labels"][RACK] == "rack-003"
    assert set(view.objects(Kind.NODE)) == {("", "gpu-node-00000"), ("", "gpu-node-00001")}


def test_the_demo_cluster_lists_the_nodes_its_slices_name() -> None:
    view = ClusterView()
    StaticSource(view).load()
    nodes = {name for _, name in view.objects(Kind.NODE)}
    named = {s["spec"]["nodeName"] for s in view.resource_slices().values()}
    assert nodes == named == {"node-a", "node-b"}


def _gpu(name: str, product: str) -> Obj:
    return {
        "name": name,
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}},
        "capacity": {"memory": {"value": "80Gi"}},
    }


def _slice(name: str, product: str, **selection: Any) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [_gpu(f"gpu-{i}", product) for i in range(2)],
            **selection,
        },
    }


def _cluster(with_nodes: bool) -> list[Obj]:
    """node-h (H100s, rack r1) and node-l (L4s, no rack); a rack pool of GB200s for rack r1."""
    rack = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": RACK, "operator": "In", "values": ["r1"]}]}]}  # fmt: skip
    found = [
        namespace("ml-research", "dra-only"),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
        _slice("node-h", "NVIDIA H100", nodeName="node-h"),
        _slice("node-l", "NVIDIA L4", nodeName="node-l"),
        _slice("rack-r1", "NVIDIA GB200", nodeSelector=rack),
    ]
    if with_nodes:
        found += [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "node-h", "labels": {RACK: "r1"}},
            },
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-l", "labels": {}}},
        ]
    return found


def _product(prefix: str) -> list[Obj]:
    expression = f'device.attributes["{DRIVER}"].productName.startsWith("{prefix}")'
    return [{"cel": {"expression": expression}}]


PAIR = claim(
    "pair",
    exact("rack", selectors=_product("NVIDIA GB200")),
    exact("l4", selectors=_product("NVIDIA L4")),
)


def test_with_the_files_nodes_a_rack_gpu_and_an_l4_elsewhere_are_never_on_one_node() -> None:
    decision = decide(PAIR, Endpoint.VALIDATE, objects=_cluster(with_nodes=True))
    assert decision.warnings == (
        "spec: each of the 2 requests can be satisfied on some node, but no node has enough "
        "devices for all of them together (a pod's requests are allocated on one node)",
    )


def test_without_nodes_in_the_file_the_rack_selector_is_taken_to_match() -> None:
    decision = decide(PAIR, Endpoint.VALIDATE, objects=_cluster(with_nodes=False))
    assert decision.warnings == ()
