"""The allocation model's verdicts, one cause at a time, on NVIDIA-shaped slices."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.allocation import NEVER, NOT_NOW, OK, UNCHECKED
from app.cluster.view import Kind
from tests.allocation.helpers import Cluster, request, spec
from tests.allocation.nvidia import DRIVER, allocated_claim, gpu, mig, node_slice

Make = Callable[..., Cluster]
TWO_NODES = (node_slice("node-a"), node_slice("node-b"))


def messages(verdict: Any) -> list[str]:
    return [f"{p.path}: {p.message}" for p in verdict.problems]


# -- per node ----------------------------------------------------------------------------------


def test_a_4_gpu_claim_on_2_gpu_nodes_is_never_with_the_most_on_any_node(cluster: Make) -> None:
    verdict = cluster(*TWO_NODES).check(spec(request(count=4)))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [
        "spec.devices.requests[0]: asks for 4 devices on one node; the most on any node is 2 "
        "(node-a, node-b)"
    ]


def test_a_request_without_selectors_short_in_the_cluster_says_what_the_class_has(
    cluster: Make,
) -> None:
    # no selector to blame: the class's devices are all there is
    verdict = cluster(*TWO_NODES).check(spec(request(count=5)))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [
        "spec.devices.requests[0]: asks for 5 devices, the whole cluster has 4 devices of the class"
    ]
    selected = request("gpu", "gpu.nvidia.com", 5, "device.driver != ''")
    (with_selector,) = messages(cluster(*TWO_NODES).check(spec(selected)))
    assert "4 can match: 4 of the 4 devices of class gpu.nvidia.com match" in with_selector


def test_a_2_gpu_claim_fits_one_node(cluster: Make) -> None:
    assert cluster(*TWO_NODES).check(spec(request(count=2))).outcome == OK


def test_two_requests_that_fit_apart_but_not_on_one_node_are_never(cluster: Make) -> None:
    verdict = cluster(*TWO_NODES).check(spec(request("a", count=2), request("b", count=1)))
    assert verdict.outcome == NEVER
    assert "no node has enough devices for all of them together" in messages(verdict)[0]


def test_a_pods_claims_are_allocated_together_on_one_node(cluster: Make) -> None:
    c = cluster(*TWO_NODES)
    assert c.check(spec(request(count=2))).outcome == OK
    verdict = c.check(spec(request(count=2)), spec(request(count=1)))
    assert verdict.outcome == NEVER
    assert verdict.problems[0].path == "spec.resourceClaims"


# -- constraints -------------------------------------------------------------------------------


def test_match_attribute_on_a_per_device_value_cannot_hold_across_two_devices(
    cluster: Make,
) -> None:
    constraint = {"requests": ["a", "b"], "matchAttribute": f"{DRIVER}/uuid"}
    verdict = cluster(*TWO_NODES).check(spec(request("a"), request("b"), constraints=[constraint]))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [
        "spec.devices.constraints[0]: constraint matchAttribute gpu.nvidia.com/uuid across "
        "requests a, b: no node has devices for these requests that share one value of it (a "
        "device without the attribute never satisfies it)"
    ]


def test_match_attribute_on_a_shared_value_holds(cluster: Make) -> None:
    constraint = {"matchAttribute": f"{DRIVER}/productName"}
    verdict = cluster(*TWO_NODES).check(spec(request("a"), request("b"), constraints=[constraint]))
    assert verdict.outcome == OK


def test_distinct_attribute_on_a_shared_value_is_never(cluster: Make) -> None:
    constraint = {"distinctAttribute": f"{DRIVER}/productName"}
    verdict = cluster(*TWO_NODES).check(spec(request(count=2), constraints=[constraint]))
    assert verdict.outcome == NEVER
    assert "constraint distinctAttribute gpu.nvidia.com/productName" in messages(verdict)[0]


def test_distinct_attribute_holds_one_value_per_request_as_upstream_does(cluster: Make) -> None:
    # upstream's distinctAttributeConstraint keeps one value per request name (its map is keyed
    # by the request), so a device is checked against the last value each request added: three
    # A100s of index 0, 1, 2 for r0 and a rack GB200 of index 0 for r1 pass, as the scheduler
    # allocated them (a generated fleet: seed 258297783, claim #93)
    a100 = "NVIDIA A100-SXM4-40GB"
    local = node_slice("node-a", 3, devices=[gpu("node-a", i, product=a100) for i in range(3)])
    rack = node_slice("rack-0", devices=[gpu("rack-0", i, consumesCounters=[]) for i in range(2)])
    del rack["spec"]["nodeName"], rack["spec"]["sharedCounters"]
    rack["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "example.com/rack-index", "operator": "Gt", "values": ["0"]},
                    {"key": "example.com/rack-index", "operator": "Lt", "values": ["2"]},
                ]
            }
        ]
    }
    c = cluster(local, rack)
    c.view.subscribe(c.model.on_change)
    labels = {"example.com/rack": "rack-0", "example.com/rack-index": "1"}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "labels": labels}}
    c.view.apply(Kind.NODE, node)
    constraint = {"requests": ["r0", "r1"], "distinctAttribute": f"{DRIVER}/index"}
    claim = spec(request("r0", count=3), request("r1"), constraints=[constraint])
    assert c.check(claim).outcome == OK
    # r1's second device is checked against r0's last value and r1's first
    pair = spec(request("r0", count=3), request("r1", count=2), constraints=[constraint])
    assert c.check(pair).outcome == OK


def test_a_device_a_constraint_refuses_keeps_its_counters_charged_as_upstream_does(
    cluster: Make,
) -> None:
    # upstream's allocateDevice charges a device's counters before it checks the constraints
    # and does not give them back when one refuses it: r0's second pick, gpu-1 (an H100 like
    # gpu-0), keeps gpu-1's counters, so the Hopper r1 then needs is out of reach on this node,
    # as the scheduler found (a generated fleet: seed 2683765576, claim #4)
    devices = [gpu("node-a", i) for i in range(2)]
    devices.append(gpu("node-a", 2, product="NVIDIA GB200", consumesCounters=[]))
    c = cluster(node_slice("node-a", 2, devices=devices))
    h100 = f'device.attributes["{DRIVER}"].productName == "NVIDIA H100 80GB HBM3"'
    constraint = {"requests": ["r0", "r1"], "distinctAttribute": f"{DRIVER}/productName"}
    requests = (request("r0", count=2), request("r1", "gpu.nvidia.com", 1, h100))
    assert c.check(spec(*requests, constraints=[constraint])).outcome == NEVER
    # r0 = gpu-0 and the GB200, r1 = gpu-1, had gpu-1 not been tried for r0 first
    other = [d for d in devices if d["name"] != "gpu-2"]
    other.insert(1, devices[2])
    reordered = cluster(node_slice("node-a", 2, devices=other))
    assert reordered.check(spec(*requests, constraints=[constraint])).outcome == OK


# -- taints ------------------------------------------------------------------------------------

UNHEALTHY = {"key": "nvidia.com/unhealthy", "effect": "NoSchedule"}


def _tainted_node(taints: int) -> Any:
    devices = [gpu("node-a", i, taints=[UNHEALTHY]) for i in range(taints)]
    devices += [gpu("node-a", i) for i in range(taints, 4)]
    return node_slice("node-a", 4, devices=devices)


def test_tainted_devices_are_skipped_and_named(cluster: Make) -> None:
    verdict = cluster(_tainted_node(3)).check(spec(request(count=2)))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [
        "spec.devices.requests[0]: asks for 2 devices: 3 of 4 matching devices carry taint "
        "nvidia.com/unhealthy:NoSchedule, which the request does not tolerate"
    ]


def test_a_tolerated_taint_does_not_count(cluster: Make) -> None:
    tolerations = [{"key": "nvidia.com/unhealthy", "operator": "Exists"}]
    verdict = cluster(_tainted_node(3)).check(spec(request(count=2, tolerations=tolerations)))
    assert verdict.outcome == OK


def test_a_taint_with_effect_none_never_prevents_allocation(cluster: Make) -> None:
    devices = [gpu("node-a", i, taints=[{"key": "k", "effect": "None"}]) for i in range(2)]
    c = cluster(node_slice("node-a", 2, devices=devices))
    assert c.check(spec(request(count=2))).outcome == OK


def test_all_mode_fails_on_a_tainted_matching_device(cluster: Make) -> None:
    verdict = cluster(_tainted_node(1)).check(spec(request(count=None, allocationMode="All")))
    assert verdict.outcome == NEVER
    assert "1 of 4 matching devices carry taint" in messages(verdict)[0]


# -- shared counters (MIG and the whole GPU) ---------------------------------------------------

MIG_NODE = node_slice("node-a", 1, migs={0: [("3g.40gb", 0), ("3g.40gb", 4), ("1g.10gb", 4)]})


def test_a_gpu_and_a_mig_partition_of_it_exclude_each_other(cluster: Make) -> None:
    c = cluster(MIG_NODE)
    assert c.check(spec(request("g"))).outcome == OK
    assert c.check(spec(request("m", "mig.nvidia.com"))).outcome == OK
    verdict = c.check(spec(request("g"), request("m", "mig.nvidia.com")))
    assert verdict.outcome == NEVER


def test_overlapping_mig_placements_exclude_each_other(cluster: Make) -> None:
    # a 3g.40gb on memory slices 0-3 and a 1g.10gb on slice 2
    c = cluster(node_slice("node-a", 1, migs={0: [("3g.40gb", 0), ("1g.10gb", 2)]}))
    assert c.check(spec(request("m", "mig.nvidia.com", 1))).outcome == OK
    verdict = c.check(spec(request("m", "mig.nvidia.com", 2)))
    assert verdict.outcome == NEVER
    assert "draw on shared counters (gpu-0-counter-set)" in messages(verdict)[0]


def test_a_gpu_whose_partition_is_allocated_is_not_now_with_the_counters_left(
    cluster: Make,
) -> None:
    c = cluster(MIG_NODE, allocated_claim("held", ("node-a", "gpu-0-mig-1g10gb-4")))
    verdict = c.check(spec(request("g")))
    assert verdict.outcome == NOT_NOW
    assert messages(verdict) == [
        "spec.devices.requests[0]: not now: 0 of 1 matching devices are allocated to other "
        "claims; counter set gpu-0-counter-set has 7 of 8 memory slices left"
    ]


def _a100_node(taint: bool) -> Any:
    """An A100 40GB node as the generated fleet publishes it: gpu-0 and gpu-1 in MIG mode (two
    1g.10gb and a 3g.40gb on a 40Gi counter set), gpu-2 whole; gpu-0's 3g.40gb tainted."""
    made = node_slice(
        "node-a", 3, migs={k: [("1g.10gb", 0), ("1g.10gb", 1), ("3g.40gb", 4)] for k in (0, 1)}
    )
    for counter_set in made["spec"]["sharedCounters"]:
        counter_set["counters"]["memory"] = {"value": "40Gi"}
    for device in made["spec"]["devices"]:
        if device["attributes"]["type"]["string"] == "gpu":
            device["consumesCounters"][0]["counters"]["memory"] = {"value": "40Gi"}
        if taint and device["name"] == "gpu-0-mig-3g40gb-4":
            device["taints"] = [UNHEALTHY]
    return made


def test_a_tainted_partition_keeps_its_counters_charged_as_upstream_does(cluster: Make) -> None:
    # upstream's allocateDevice charges a device's counters before it checks its taints and does
    # not give them back when a taint refuses it: once r1 has tried gpu-0's tainted 3g.40gb,
    # gpu-0's memory is gone for the rest of the node's search, and with gpu-2 for r0, r1 finds
    # only gpu-1's two 1g.10gb (a generated fleet: seed 2683765576, claim #28)
    claim = spec(request("r0"), request("r1", "mig.nvidia.com", 3))
    assert cluster(_a100_node(taint=True)).check(claim).outcome == NEVER
    assert cluster(_a100_node(taint=False)).check(claim).outcome == OK
    tolerated = spec(
        request("r0"), request("r1", "mig.nvidia.com", 3, tolerations=[{"operator": "Exists"}])
    )
    assert cluster(_a100_node(taint=True)).check(tolerated).outcome == OK


# -- what is allocated -------------------------------------------------------------------------


def test_devices_allocated_to_other_claims_make_it_not_now(cluster: Make) -> None:
    held = allocated_claim("held", ("node-a", "gpu-0"), ("node-b", "gpu-1"))
    verdict = cluster(*TWO_NODES, held).check(spec(request(count=2)))
    assert verdict.outcome == NOT_NOW
    assert messages(verdict) == [
        "spec.devices.requests[0]: not now: 2 of 4 matching devices are allocated to other claims"
    ]


def test_an_admin_access_result_holds_nothing(cluster: Make) -> None:
    held = allocated_claim("watch", ("node-a", "gpu-0"), ("node-a", "gpu-1"), adminAccess=True)
    assert cluster(node_slice("node-a"), held).check(spec(request(count=2))).outcome == OK


def test_an_admin_request_ignores_what_is_allocated(cluster: Make) -> None:
    # (devices without counters: upstream charges an admin request the counters of a device
    # whose counters an allocated claim already holds, so there it fails like any other)
    devices = [gpu("node-a", i) for i in range(2)]
    for device in devices:
        del device["consumesCounters"]
    held = allocated_claim("held", ("node-a", "gpu-0"), ("node-a", "gpu-1"))
    c = cluster(node_slice("node-a", devices=devices), held)
    assert c.check(spec(request(count=2))).outcome == NOT_NOW
    assert c.check(spec(request(count=2, adminAccess=True))).outcome == OK


def test_all_mode_is_not_now_while_one_matching_device_is_allocated(cluster: Make) -> None:
    held = allocated_claim("held", ("node-a", "gpu-0"))
    c = cluster(node_slice("node-a"), held)
    assert c.check(spec(request(count=None, allocationMode="All"))).outcome == NOT_NOW


# -- firstAvailable --------------------------------------------------------------------------


def test_first_available_is_ok_when_a_later_subrequest_fits(cluster: Make) -> None:
    subrequests = [
        {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
        {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 2},
    ]
    c = cluster(*TWO_NODES)
    assert c.check(spec({"name": "r", "firstAvailable": subrequests})).outcome == OK
    verdict = c.check(spec({"name": "r", "firstAvailable": subrequests[:1] * 2}))
    assert verdict.outcome == NEVER
    assert "none of its 2 firstAvailable alternatives" in messages(verdict)[0]


# -- CEL runtime errors ------------------------------------------------------------------------

NVLINK = f'device.attributes["{DRIVER}"].nvlinkDomain == 0'


def test_a_selector_erring_on_a_device_the_scheduler_reaches_is_never(cluster: Make) -> None:
    a = node_slice("node-a")
    for device in a["spec"]["devices"]:
        device["attributes"]["nvlinkDomain"] = {"int": 0}
    verdict = cluster(a, node_slice("node-b")).check(
        spec(request("gpu", "gpu.nvidia.com", 1, NVLINK))
    )
    assert verdict.outcome == NEVER
    (message,) = messages(verdict)
    assert "selector #0 errs on device gpu.nvidia.com/node-b/gpu-0" in message
    assert "the scheduler aborts the whole pod" in message
    assert f'guard it: "nvlinkDomain" in device.attributes["{DRIVER}"] && {NVLINK}' in message


def test_an_allocated_device_is_skipped_before_its_selector_errs(cluster: Make) -> None:
    a = node_slice("node-a", devices=[gpu("node-a", 0)])
    a["spec"]["devices"][0]["attributes"]["nvlinkDomain"] = {"int": 0}
    b = node_slice("node-b", 1)
    held = allocated_claim("held", ("node-b", "gpu-0"))
    c = cluster(a, b, held)
    # node-b's gpu-0 would err, but it is held: the scheduler skips it before its selectors
    # run, and allocates node-a's (as upstream's allocator does)
    assert c.check(spec(request("gpu", "gpu.nvidia.com", 1, NVLINK))).outcome == OK


# -- consumable capacity -----------------------------------------------------------------------


def _shared_gpu(node: str) -> Any:
    device = {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "attributes": {"type": {"string": "gpu"}},
        "capacity": {
            "memory": {
                "value": "80Gi",
                "requestPolicy": {
                    "default": "80Gi",
                    "validRange": {"min": "1Gi", "max": "80Gi", "step": "1Gi"},
                },
            }
        },
    }
    return node_slice(node, 1, devices=[device])


def test_a_capacity_request_over_what_any_device_allows_is_never(cluster: Make) -> None:
    verdict = cluster(_shared_gpu("node-a")).check(
        spec(request(capacity={"requests": {"memory": "100Gi"}}))
    )
    assert verdict.outcome == NEVER
    assert "the most memory a device allows is 80Gi" in messages(verdict)[0]


def test_shares_fit_until_the_capacity_is_used(cluster: Make) -> None:
    share = {"consumedCapacity": {"memory": "60Gi"}, "shareID": "a"}
    c = cluster(_shared_gpu("node-a"), allocated_claim("held", ("node-a", "gpu-0"), **share))
    assert c.check(spec(request(capacity={"requests": {"memory": "20Gi"}}))).outcome == OK
    verdict = c.check(spec(request(capacity={"requests": {"memory": "20500Mi"}})))
    assert verdict.outcome == NOT_NOW  # rounded up to 21Gi: 81Gi of 80Gi
    assert "has 20Gi of 80Gi gpu.nvidia.com/memory left" in messages(verdict)[0]


# -- pools -------------------------------------------------------------------------------------


def test_only_the_newest_generation_of_a_pool_counts(cluster: Make) -> None:
    old = node_slice("node-a", 4, generation=1, name="old")
    new = node_slice("node-a", 1, generation=2, name="new")
    assert cluster(old, new).check(spec(request(count=2))).outcome == NEVER


def test_an_incomplete_pool_is_not_allocated_from(cluster: Make) -> None:
    verdict = cluster(node_slice("node-a", 2, slices=2)).check(spec(request(count=1)))
    assert verdict.outcome == NEVER
    assert "pools the scheduler can use now" in messages(verdict)[0]


def test_devices_for_all_nodes_join_each_nodes_own(cluster: Make) -> None:
    shared = node_slice("fabric", 2, name="fabric")
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    c = cluster(node_slice("node-a"), shared)
    assert c.check(spec(request(count=4))).outcome == OK
    assert c.check(spec(request(count=5))).outcome == NEVER


def test_a_slice_for_named_nodes_reaches_only_them(cluster: Make) -> None:
    pinned = node_slice("node-b", 2, name="pinned")
    del pinned["spec"]["nodeName"]
    pinned["spec"]["pool"]["name"] = "pinned"
    pinned["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}
        ]
    }
    c = cluster(node_slice("node-a"), node_slice("node-b"), pinned)
    verdict = c.check(spec(request(count=4)))
    assert verdict.outcome == OK
    assert c.check(spec(request(count=5))).outcome == NEVER


# -- cost --------------------------------------------------------------------------------------


def test_a_repeated_shape_is_a_memo_hit_until_something_changes(cluster: Make) -> None:
    c = cluster(*TWO_NODES)
    c.check(spec(request(count=2)))
    hits = c.model.memo_hits
    c.check(spec(request(count=2)))
    assert c.model.memo_hits == hits + 1
    c.view.apply(Kind.RESOURCE_SLICE, node_slice("node-c"))  # a node the verdict did not read
    c.check(spec(request(count=2)))
    assert c.model.memo_hits == hits + 2
    c.view.apply(Kind.RESOURCE_SLICE, node_slice("node-a", generation=2))  # the one it read
    c.check(spec(request(count=2)))
    assert c.model.memo_hits == hits + 2


def test_a_class_this_engine_cannot_evaluate_leaves_the_claim_unchecked(cluster: Make) -> None:
    c = cluster(*TWO_NODES)
    verdict = c.check(spec(request(device_class="")))
    assert verdict.outcome == UNCHECKED


@pytest.mark.parametrize("count", [1, 2])
def test_mig_devices_are_their_own_class(cluster: Make, count: int) -> None:
    profile = 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
    c = cluster(node_slice("node-a", 1, migs={0: [("1g.10gb", k) for k in range(count)]}))
    assert c.check(spec(request("m", "mig.nvidia.com", count, profile))).outcome == OK


def test_mig_helper_builds_unique_names() -> None:
    assert mig("n", 0, "1g.10gb", 3)["name"] == "gpu-0-mig-1g10gb-3"


def test_verdicts_are_also_bounded_by_the_bytes_they_hold(cluster: Make) -> None:
    from app.allocation import Model

    made = cluster(*TWO_NODES)
    made.model = Model(made.index, max_bytes=4000)
    for count in range(3, 13):  # ten "never" verdicts, each with its nearest miss (~1 KB)
        assert made.check(spec(request(count=count))).outcome == NEVER
    memo = made.model._memo
    assert memo.evictions > 0
    assert 0 < memo.bytes <= 4000
