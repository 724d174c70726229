"""What the cluster view keeps of each kind (app.cluster.slim)."""

from __future__ import annotations

from typing import Any

import pytest

from app.cluster.slim import SharedValues, slim
from app.cluster.view import ClusterView, Kind
from tests.cluster import objects

Obj = dict[str, Any]


def served(obj: Obj) -> Obj:
    """`obj` as the API server returns it: server-set metadata and managedFields."""
    meta = obj["metadata"]
    meta.update(
        uid="6c1f7a52-0d8e-4f2a-9a51-3b4f2f1c9d10",
        resourceVersion="4242",
        generation=3,
        creationTimestamp="2026-11-21T06:00:00Z",
        managedFields=[{"manager": "kube-controller-manager", "fieldsV1": {"f:status": {}}}],
    )
    return obj


@pytest.mark.parametrize(
    ("obj", "kept"),
    [
        (
            objects.namespace("gpu-e2e", **{"gpu-mode": "dra-only"}),
            {"kind", "apiVersion", "metadata"},
        ),
        (objects.device_class("gpu.nvidia.com"), {"kind", "apiVersion", "metadata", "spec"}),
        (objects.resource_slice("node-1", 2), {"kind", "apiVersion", "metadata", "spec"}),
        (objects.claim("c", "ns"), {"kind", "apiVersion", "metadata", "spec"}),
        (
            objects.claim("c", "ns", allocated=True),
            {"kind", "apiVersion", "metadata", "spec", "status"},
        ),
        (objects.claim_template("t", "ns"), {"kind", "apiVersion", "metadata", "spec"}),
        (objects.quota("q", "ns"), {"kind", "apiVersion", "metadata", "spec", "status"}),
    ],
    ids=lambda v: v["kind"] if isinstance(v, dict) and "kind" in v else None,
)
def test_each_kind_keeps_only_the_fields_policies_read(obj: Obj, kept: set[str]) -> None:
    obj = served(obj)
    small = slim(obj["kind"], obj)
    assert set(small) == kept
    # a DeviceClass keeps its creationTimestamp: of two mapping one extended resource name, the
    # scheduler uses the newer
    extra = {"creationTimestamp"} if obj["kind"] == "DeviceClass" else set()
    assert set(small["metadata"]) <= {
        "name",
        "namespace",
        "labels",
        "uid",
        "resourceVersion",
        "generation",
        "deletionTimestamp",
        *extra,
    }
    assert small["metadata"]["resourceVersion"] == "4242"
    if "spec" in small:
        assert small["spec"] is obj["spec"]  # shared, not copied


def test_a_claim_keeps_its_devices_and_holders_and_drops_the_rest_of_its_status() -> None:
    small = slim("ResourceClaim", served(objects.claim("c", "ns", count=2, allocated=True)))
    assert small["status"] == {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": "gpu.nvidia.com",
                        "pool": "node-1",
                        "device": "gpu-0",
                    },
                    {
                        "request": "gpu",
                        "driver": "gpu.nvidia.com",
                        "pool": "node-1",
                        "device": "gpu-1",
                    },
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "c-pod", "uid": "7d3a-pod"}],
    }


def test_a_quota_keeps_its_hard_limits_and_what_is_used() -> None:
    small = slim("ResourceQuota", served(objects.quota("q", "ns")))
    assert small["spec"]["hard"]
    assert small["status"] == {"used": {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "1"}}


def test_slimming_twice_changes_nothing() -> None:
    once = slim("ResourceClaim", served(objects.claim("c", "ns", allocated=True)))
    assert slim("ResourceClaim", once) == once


@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": {"name": "x"}, "spec": "not a map", "status": ["no"]},
        {"metadata": {"name": "x"}, "status": {"allocation": {"devices": {"results": "?"}}}},
        {"metadata": {"name": "x"}, "status": {"allocation": {"devices": {"results": [1, {}]}}}},
        {"metadata": "odd"},
        {},
    ],
)
def test_odd_shapes_from_the_wire_never_raise(obj: Obj) -> None:
    small = slim("ResourceClaim", obj)
    assert small["kind"] == "ResourceClaim"


def test_the_view_slims_what_it_is_given() -> None:
    view = ClusterView()
    view.apply(Kind.RESOURCE_CLAIM, served(objects.claim("c", "ns", allocated=True)))
    held = view.get(Kind.RESOURCE_CLAIM, "c", "ns")
    assert held is not None
    # who holds it, by name and uid only: a DeviceTaintRule's blast radius, preemption's holders
    assert held["status"]["reservedFor"] == [
        {"resource": "pods", "name": "c-pod", "uid": "7d3a-pod"}
    ]
    assert "managedFields" not in held["metadata"]


def test_equal_device_values_are_held_once_and_distinct_ones_apart() -> None:
    shared = SharedValues()
    a = shared.device(objects.gpu_device(0))
    b = shared.device(objects.gpu_device(1))
    assert a["attributes"]["productName"] is b["attributes"]["productName"]
    assert a["capacity"]["memory"] is b["capacity"]["memory"]
    assert a["attributes"]["uuid"] is not b["attributes"]["uuid"]
    assert a == objects.gpu_device(0)


def test_values_of_different_types_are_never_merged() -> None:
    shared = SharedValues()
    one = shared.values({"x": {"int": 1}})["x"]
    true = shared.values({"y": {"bool": True}})["y"]
    assert one == {"int": 1}
    assert true == {"bool": True}


def test_past_its_limit_the_table_keeps_new_values_unshared() -> None:
    shared = SharedValues(limit=2)
    for serial in range(5):
        shared.values({"serial": {"string": f"S{serial}"}})
    assert len(shared) == 2
    late = shared.values({"serial": {"string": "S9"}})["serial"]
    assert late == {"string": "S9"}
    assert shared.values({"serial": {"string": "S0"}})["serial"] == {"string": "S0"}


def test_non_scalar_and_odd_device_values_pass_through() -> None:
    shared = SharedValues()
    odd = {"list": {"string": ["a"]}, "two": {"int": 1, "string": "x"}, "none": None}
    assert shared.values(odd) == odd
    assert shared.device("not a device") == "not a device"


def test_a_pod_group_keeps_its_group_claims_and_the_claims_made_for_them_only() -> None:
    claims = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    made = [{"name": "gpus", "resourceClaimName": "trainer-gpus-x7k2p"}]
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "trainer", "namespace": "ml", "managedFields": [{}]},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}, "resourceClaims": claims},
        "status": {
            "conditions": [{"type": "PodGroupInitiallyScheduled"}],
            "resourceClaimStatuses": made,
        },
    }
    slimmed = slim("PodGroup", group)
    assert slimmed["spec"] == {"resourceClaims": claims}
    assert slimmed["status"] == {"resourceClaimStatuses": made}
    assert "managedFields" not in slimmed["metadata"]
    assert slim("PodGroup", slimmed) == slimmed


def test_an_allocation_result_keeps_the_tolerations_it_was_allocated_with() -> None:
    claim = served(objects.claim("c", "ns", count=1, allocated=True))
    toleration = {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}
    claim["status"]["allocation"]["devices"]["results"][0]["tolerations"] = [toleration]
    (result,) = slim("ResourceClaim", claim)["status"]["allocation"]["devices"]["results"]
    assert result["tolerations"] == [toleration]  # whether a NoExecute taint evicts its pods
