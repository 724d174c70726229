"""The indexes are complete when the view has synced (before /readyz), and kept per slice after."""

from __future__ import annotations

from typing import Any

from app.allocation import Allocations, ClaimInput
from app.bounded import CacheName, cache_stats
from app.cluster.view import ClusterView, Kind
from app.config import load_policy
from app.k8s.claims import parse_claim_spec
from app.pipeline import Pipeline
from app.policies.cel_runtime import cel_runtime
from tests.allocation.nvidia import CLASSES, node_slice

NODES = [f"node-{i}" for i in range(4)]


def _claim(selector: str) -> ClaimInput:
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": {"expression": selector}}],
        },
    }
    return ClaimInput("claim c", parse_claim_spec({"devices": {"requests": [request]}}))


SHAPES = [
    _claim('device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA")'),
    _claim('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'),
]


def test_the_device_index_and_inventory_are_ready_before_the_view_reports_synced() -> None:
    view = ClusterView()
    pipeline = Pipeline(load_policy(), view, own_namespace="dra-webhook")
    runtime = pipeline.parts[cel_runtime]
    seen: dict[str, Any] = {}

    def probe() -> None:  # runs after the pipeline's warm-up, as the readiness gate does
        seen["synced"] = view.synced
        seen["inventory"] = runtime.model._inventory
        seen["class memo"] = len(runtime.index._memo)

    view.when_synced(probe)
    for kind in Kind:
        objects: list[dict[str, Any]] = []
        if kind is Kind.DEVICE_CLASS:
            objects = CLASSES
        elif kind is Kind.RESOURCE_SLICE:
            objects = [node_slice(n, 8) for n in NODES]
        view.replace(kind, objects)
    assert seen["synced"] is False
    assert seen["inventory"] is not None
    assert sorted(seen["inventory"].nodes) == NODES
    assert seen["class memo"] == len(CLASSES)  # each class's selectors ran, per slice
    assert view.synced


def _verdict_hits() -> int:
    return cache_stats()[CacheName.SATISFIABILITY_VERDICTS].hits


def test_a_slice_change_leaves_the_other_shapes_cached() -> None:
    view = ClusterView()
    pipeline = Pipeline(load_policy(), view, own_namespace="dra-webhook")
    runtime = pipeline.parts[cel_runtime]
    for obj in [*CLASSES, *(node_slice(n, 8) for n in NODES)]:
        view.apply(Kind(obj["kind"]), obj)
    allocations = view.derived(Allocations)
    classes = view.device_classes()
    for shape in SHAPES:
        assert runtime.model.check([shape], classes, allocations).outcome == "ok"
    index_misses = runtime.index.memo_misses
    hits = _verdict_hits()

    # a driver republishes the last node's slice (a health change): one slice, one node
    view.apply(Kind.RESOURCE_SLICE, node_slice(NODES[-1], 8, generation=2))
    for shape in SHAPES:
        assert runtime.model.check([shape], classes, allocations).outcome == "ok"

    assert _verdict_hits() == hits + len(SHAPES)  # as /metrics counts them
    assert runtime.index.memo_misses == index_misses  # no shape evaluated anew
