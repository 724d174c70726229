"""A claim holds at most 32 devices (``AllocationResultsMaxSize``), as upstream's allocator
counts them: API validation bounds the number of requests, never ``count``, so a claim asking
for more is stored and the scheduler fails its pod with an error (SchedulerError) on every
attempt; the model answers never, at the request that asks for them.

The counts are upstream's (``Allocate``'s ``minDevicesPerClaim``): ``count``, every matching
device of the node for ``allocationMode: All``, the fewest of a ``firstAvailable`` request's
subrequests; while searching, a subrequest that would take the claim past the limit is not tried
(upstream's ``errAllocationResultMaxSizeExceeded``). The counts alone decide a claim whose
selectors this webhook cannot evaluate, and an ``All`` request makes an ok verdict depend on
every node. Cases ported from upstream's table (structured/internal/allocatortesting, v1.36) are
named after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.allocation import ALLOCATION_RESULTS_MAX_SIZE, NEVER, OK, UNCHECKED
from app.cluster.view import Kind
from tests.allocation.helpers import Cluster, request, spec
from tests.allocation.nvidia import DRIVER, gpu, node_slice

Make = Callable[..., Cluster]
LIMIT = ALLOCATION_RESULTS_MAX_SIZE
WHY = (
    "but a claim holds at most 32 devices (AllocationResultsMaxSize): the scheduler fails the "
    "pod with an error (SchedulerError) instead of allocating it"
)


def _big(node: str, gpus: int) -> Any:
    """A node with ``gpus`` whole GPUs (no counters: each device stands alone)."""
    return node_slice(node, devices=[gpu(node, i, consumesCounters=[]) for i in range(gpus)])


def messages(verdict: Any) -> list[str]:
    return [f"{p.path}: {p.message}" for p in verdict.problems]


def _all(**fields: Any) -> Any:
    return request(count=None, allocationMode="All", **fields)


def _first(*counts: int) -> Any:
    subrequests = [
        {"name": f"s{i}", "deviceClassName": "gpu.nvidia.com", "count": n}
        for i, n in enumerate(counts)
    ]
    return {"name": "r", "firstAvailable": subrequests}


def test_the_limit_is_upstreams_allocation_results_max_size() -> None:
    assert LIMIT == 32


def test_max_number_devices_a_claim_of_32_is_allocated(cluster: Make) -> None:
    assert cluster(_big("node-a", 32)).check(spec(request(count=32))).outcome == OK


def test_a_count_of_40_is_never_at_its_request_with_the_limit(cluster: Make) -> None:
    verdict = cluster(_big("node-a", 48)).check(spec(request(count=40)))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [f"spec.devices.requests[0]: asks for 40 devices, {WHY}"]


def test_too_many_devices_single_request_fails_before_devices_are_counted(cluster: Make) -> None:
    # upstream checks the limit before the search: the error, not "2 can match"
    verdict = cluster(node_slice("node-a")).check(spec(request(count=500)))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [f"spec.devices.requests[0]: asks for 500 devices, {WHY}"]


def test_too_many_devices_total_names_every_request_at_the_claims_requests(
    cluster: Make,
) -> None:
    verdict = cluster(_big("node-a", 33)).check(spec(request("a", count=32), request("b", count=1)))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [
        f"spec.devices.requests: its requests need 33 devices together (a 32, b 1), {WHY}"
    ]


def test_a_pods_claims_each_have_their_own_limit(cluster: Make) -> None:
    c = cluster(_big("node-a", 64))
    assert c.check(spec(request(count=32)), spec(request(count=32))).outcome == OK
    verdict = c.check(spec(request(count=1)), spec(request(count=33)))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [f"claims[1].spec.devices.requests[0]: asks for 33 devices, {WHY}"]


# -- allocationMode: All --------------------------------------------------------------------------


def test_all_devices_on_a_node_of_32_are_allocated(cluster: Make) -> None:
    assert cluster(_big("node-a", 32)).check(spec(_all())).outcome == OK


def test_all_devices_on_a_node_of_33_are_never_naming_the_node(cluster: Make) -> None:
    verdict = cluster(_big("node-a", 33)).check(spec(_all()))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [
        "spec.devices.requests[0]: asks for all matching devices (allocationMode All), and 33 "
        f"match on node-a, {WHY}"
    ]


def test_all_devices_count_what_the_selectors_match_on_the_node(cluster: Make) -> None:
    devices = [gpu("node-a", i, consumesCounters=[]) for i in range(40)]
    for device in devices[:10]:
        device["attributes"]["productName"] = {"string": "NVIDIA A100"}
    c = cluster(node_slice("node-a", devices=devices))
    h100 = 'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")'
    matching_30 = spec(request("gpu", "gpu.nvidia.com", None, h100, allocationMode="All"))
    assert c.check(matching_30).outcome == OK
    assert c.check(spec(_all())).outcome == NEVER


def test_all_devices_over_the_limit_on_one_node_fail_the_pod_whatever_other_nodes_offer(
    cluster: Make,
) -> None:
    # the error on node-b stops the scheduling attempt, though node-a could take the claim
    c = cluster(_big("node-a", 2), _big("node-b", 33))
    verdict = c.check(spec(_all()))
    assert verdict.outcome == NEVER
    assert "and 33 match on node-b" in messages(verdict)[0]
    assert cluster(_big("node-a", 2), _big("node-b", 32)).check(spec(_all())).outcome == OK


def test_all_devices_and_an_exact_count_are_counted_together_per_node(cluster: Make) -> None:
    c = cluster(_big("node-a", 20))
    assert c.check(spec(_all(), request("more", count=12))).outcome == NEVER  # (20 + 12 of 20)
    verdict = cluster(_big("node-a", 30)).check(spec(_all(), request("more", count=3)))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [
        "spec.devices.requests: its requests need 33 devices together (gpu 30 (on node-a), "
        f"more 3), {WHY}"
    ]


# -- firstAvailable -----------------------------------------------------------------------------


def test_prioritized_list_too_many_in_first_subrequest_takes_the_next(cluster: Make) -> None:
    assert cluster(_big("node-a", 48)).check(spec(_first(40, 2))).outcome == OK


def test_every_subrequest_over_the_limit_is_never_at_the_request(cluster: Make) -> None:
    verdict = cluster(_big("node-a", 48)).check(spec(_first(40, 33)))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [
        "spec.devices.requests[0]: asks for at least 33 devices (the fewest any of its 2 "
        f"firstAvailable alternatives takes), {WHY}"
    ]


def test_prioritized_list_max_allocation_limit_request(cluster: Make) -> None:
    # upstream: two requests of [32, 16] on 64 devices get 16 + 16
    first, second = _first(LIMIT, LIMIT // 2), _first(LIMIT, LIMIT // 2)
    second["name"] = "r2"
    assert cluster(_big("node-a", 64)).check(spec(first, second)).outcome == OK


def test_a_subrequest_that_passes_the_limit_with_a_later_request_is_not_tried(
    cluster: Make,
) -> None:
    # 20 GPUs + 13 would be 33: the scheduler goes on to the MIG alternative, which no device
    # matches, so the claim is never allocated, although the node has the 33 GPUs
    claim = spec(_first(20, 2), request("more", count=13))
    claim["devices"]["requests"][0]["firstAvailable"][1]["deviceClassName"] = "mig.nvidia.com"
    verdict = cluster(_big("node-a", 40)).check(claim)
    assert verdict.outcome == NEVER
    assert messages(verdict) == [
        "spec: its requests fit together on a node only with more than 32 devices in one "
        "claim: a claim holds at most 32 (AllocationResultsMaxSize), and the scheduler takes a "
        "firstAvailable alternative only while its claim stays within that"
    ]
    fewer = spec(_first(20, 2), request("more", count=12))
    assert cluster(_big("node-a", 40)).check(fewer).outcome == OK


# -- what the limit alone decides ------------------------------------------------------------------

GAP = f'isIP(device.attributes["{DRIVER}"].uuid)'
"""A selector this webhook's CEL engines cannot compile (Kubernetes' IP library): the claim is
otherwise left unchecked."""


def test_a_claim_over_the_limit_is_never_whatever_a_selector_this_engine_cannot_evaluate(
    cluster: Make,
) -> None:
    # Allocate counts ``count`` against the limit before any selector runs
    c = cluster(_big("node-a", 48))
    assert c.check(spec(request("gpu", "gpu.nvidia.com", 8, GAP))).outcome == UNCHECKED
    verdict = c.check(spec(request("gpu", "gpu.nvidia.com", 40, GAP)))
    assert verdict.outcome == NEVER
    assert messages(verdict) == [f"spec.devices.requests[0]: asks for 40 devices, {WHY}"]
    together = spec(request("gpu", "gpu.nvidia.com", 30, GAP), request("more", count=3))
    assert messages(c.check(together)) == [
        f"spec.devices.requests: its requests need 33 devices together (gpu 30, more 3), {WHY}"
    ]


def test_an_all_request_this_engine_cannot_evaluate_counts_none_against_the_limit(
    cluster: Make,
) -> None:
    c = cluster(_big("node-a", 48))
    every = request("gpu", "gpu.nvidia.com", None, GAP, allocationMode="All")
    assert c.check(spec(every)).outcome == UNCHECKED  # (how many match is not known)
    assert c.check(spec(every, request("more", count=33))).outcome == NEVER


# -- the memo ------------------------------------------------------------------------------------


def test_an_ok_all_claim_is_checked_again_when_another_node_passes_the_limit(
    cluster: Make,
) -> None:
    # 40 match across the cluster, at most 20 on a node: node-a takes it; once node-b has 33,
    # the scheduler fails the pod there whatever node-a offers
    c = cluster(_big("node-a", 20), _big("node-b", 20))
    c.view.subscribe(c.model.on_change)
    assert c.check(spec(_all())).outcome == OK
    bigger = _big("node-b", 33)
    bigger["metadata"]["resourceVersion"] = "2"
    c.view.apply(Kind.RESOURCE_SLICE, bigger)
    verdict = c.check(spec(_all()))
    assert verdict.outcome == NEVER
    assert "and 33 match on node-b" in messages(verdict)[0]


def test_an_ok_all_claim_is_checked_again_when_another_nodes_pool_becomes_incomplete(
    cluster: Make,
) -> None:
    c = cluster(_big("node-a", 2), _big("node-b", 2))
    c.view.subscribe(c.model.on_change)
    assert c.check(spec(_all())).outcome == OK
    updating = _big("node-b", 2)
    updating["metadata"]["resourceVersion"] = "2"
    updating["spec"]["pool"].update(generation=2, resourceSliceCount=2)
    c.view.apply(Kind.RESOURCE_SLICE, updating)
    verdict = c.check(spec(_all()))
    assert verdict.outcome == NEVER
    assert f"resource pool {DRIVER}/node-b on node-b is incomplete" in messages(verdict)[0]
