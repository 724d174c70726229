"""app.translation.sharing: compute limits on published capacities, the older Volcano name, zeros.

The admission path is driven through a pipeline whose view also holds `PublishedCapacities`
(the index a compute limit reads: which capacities the shareable devices of a class publish).
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from app.cluster.view import Kind
from app.config import load_policy
from app.k8s.objects import PodSpecRef
from app.k8s.quantity import is_zero
from app.pipeline import Decision, Endpoint, Pipeline
from app.translation.legacy import LegacyMatcher, legacy_requests
from app.translation.sharing import PublishedCapacities
from app.transport.review import decode_review
from tests.helpers import DEMO_NAMESPACES, make_pipeline, wrap
from tests.sharing_objects import h100, resource_slice, sharing_cluster

Obj = dict[str, Any]
NS = "ml-research"  # translate


def cores_gpu(name: str, capacity: str = "cores") -> Obj:
    """A shareable NVIDIA device that also publishes a compute capacity (as HAMi's do)."""
    device = h100(name)
    device["capacity"][capacity] = {
        "value": "100",
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}},
    }
    return device


def pipeline(*extra: Obj) -> Pipeline:
    p = make_pipeline([*DEMO_NAMESPACES, *sharing_cluster(), *extra])
    p.view.derived(PublishedCapacities)
    return p


def pod(limits: Obj, ns: str = NS, *more: Obj) -> Obj:
    containers = [
        {"name": "cuda", "image": "x", "resources": {"limits": limits, "requests": dict(limits)}},
        *more,
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns},
        "spec": {"containers": containers},
    }


def decide(p: Pipeline, obj: Obj, endpoint: Endpoint = Endpoint.MUTATE) -> Decision:
    return p.review(endpoint, decode_review(orjson.dumps(wrap(obj))))


def capacity_requests(decision: Decision) -> list[Obj]:
    return [
        t["spec"]["spec"]["devices"]["requests"][0]["exactly"].get("capacity", {}).get("requests")
        for t in decision.templates
    ]


@pytest.mark.parametrize("capacity", ["cores", "compute"])
def test_a_core_limit_asks_for_the_compute_capacity_the_class_devices_publish(
    capacity: str,
) -> None:
    slice_ = resource_slice("node-c", "gpu.nvidia.com", "node-c", [cores_gpu("g", capacity)])
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4k", "nvidia.com/gpucores": "30"}
    decision = decide(pipeline(slice_), pod(limits))
    assert decision.allowed, decision.message
    assert capacity_requests(decision) == [{capacity: "30", "memory": "4000Mi"}]
    assert not [w for w in decision.warnings if "removed" in w]


def test_a_volcano_core_limit_is_removed_with_a_warning_where_no_device_publishes_one() -> None:
    limits = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "50"}
    decision = decide(pipeline(), pod(limits))
    assert decision.allowed, decision.message
    assert capacity_requests(decision) == [None]
    (warning,) = [w for w in decision.warnings if "removed" in w]
    assert "volcano.sh/vgpu-cores: 50 -> removed" in warning
    assert "publishes cores or compute" in warning


def test_published_capacities_follow_slices_and_the_drivers_a_class_pins() -> None:
    index = PublishedCapacities()
    slice_ = resource_slice("s", "gpu.example.com", "n", [cores_gpu("g", "compute")])
    index.on_change(Kind.DEVICE_CLASS, None, sharing_cluster()[1])  # shared.example.com
    index.on_change(Kind.RESOURCE_SLICE, None, slice_)
    assert index.first("shared.example.com", "gpu.nvidia.com", ("cores", "compute")) == "compute"
    assert index.first("other", "gpu.nvidia.com", ("cores", "compute")) is None
    whole = copy.deepcopy(slice_)
    whole["spec"]["devices"][0]["allowMultipleAllocations"] = False  # not a share: no capacity
    index.on_change(Kind.RESOURCE_SLICE, slice_, whole)
    assert index.first("shared.example.com", "gpu.nvidia.com", ("compute",)) is None


def test_the_older_volcano_gpu_memory_name_is_a_memory_share() -> None:
    decision = decide(pipeline(), pod({"volcano.sh/gpu-memory": "1024"}))
    assert decision.allowed, decision.message
    assert capacity_requests(decision) == [{"memory": "1024Mi"}]
    denied = decide(
        pipeline(), pod({"volcano.sh/gpu-memory": "1024"}, "gpu-e2e"), Endpoint.VALIDATE
    )
    assert not denied.allowed
    assert "volcano.sh/gpu-memory" in denied.message
    assert "capacity memory: 1024Mi" in denied.message


def test_every_gpu_name_of_the_hami_and_volcano_examples_is_legacy() -> None:
    policy = load_policy()
    names = {n for rule in policy.sharing for n in rule.names}
    for name in (
        "nvidia.com/gpumem",
        "nvidia.com/gpucores",
        "nvidia.com/gpumem-percentage",
        "volcano.sh/vgpu-number",
        "volcano.sh/vgpu-memory",
        "volcano.sh/vgpu-cores",
        "volcano.sh/gpu-memory",
    ):
        assert name in names


def zero_container(name: str, limits: Obj) -> Obj:
    return {"name": name, "image": "x", "resources": {"limits": limits, "requests": dict(limits)}}


@pytest.mark.parametrize("zero", [{"nvidia.com/gpu": "0"}, {"nvidia.com/gpu.shared": "0"}])
def test_a_zero_count_is_removed_and_never_a_claim(zero: Obj) -> None:
    obj = pod({"nvidia.com/gpu": "1"}, NS, zero_container("side", zero))
    decision = decide(pipeline(), obj)
    assert decision.allowed, decision.message
    counts = [
        t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] for t in decision.templates
    ]
    assert counts == [1]
    removed = [op["path"] for op in decision.patch if op["op"] == "remove"]
    assert any("/containers/1/resources" in path for path in removed)


def test_a_pod_asking_only_for_zero_is_no_offence_in_a_dra_only_namespace() -> None:
    p = pipeline()
    assert decide(p, pod({"nvidia.com/gpu": "0"}, "gpu-e2e"), Endpoint.VALIDATE).allowed
    denied = decide(
        p,
        pod({"nvidia.com/gpu": "2"}, "gpu-e2e", zero_container("z", {"nvidia.com/gpu": 0})),
        Endpoint.VALIDATE,
    )
    assert not denied.allowed
    assert "count 0" not in denied.message
    assert "count: 0" not in denied.message


@pytest.mark.parametrize(
    ("amount", "zero"),
    [
        *[(0, True), ("0", True), ("0Mi", True), ("-0", True), (None, True)],
        *[("1", False), ("0.5", False), ("x", False), (True, False)],
    ],
)
def test_is_zero_reads_quantities(amount: object, zero: bool) -> None:
    assert is_zero(amount) is zero


def test_legacy_requests_leave_zeros_out_unless_asked() -> None:
    spec = PodSpecRef.of(pod({"nvidia.com/gpu": "0"})["spec"], "spec", "/spec")
    matcher = LegacyMatcher(load_policy().legacy_resources)
    assert legacy_requests(spec, matcher) == []
    assert [r.resource for r in legacy_requests(spec, matcher, zeros=True)] == ["nvidia.com/gpu"]
