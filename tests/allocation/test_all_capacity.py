"""``allocationMode: All`` with consumable capacity, as upstream's allocator does it: the devices
of an All request are fixed before the search (``validateDeviceRequest``: every matching device
whose capacity fits what other claims already hold), and the search must then take each of them.
A device that an earlier request of the same pod used up is not quietly left out: the request
fails on that node. Cases ported from upstream's table (structured/internal/allocatortesting,
v1.36, ``consumable-capacity-multi-allocatable-device-allocation-mode-all-*``) keep its names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.allocation import NEVER, NOT_NOW, OK
from tests.allocation.helpers import Cluster, request, spec
from tests.allocation.nvidia import allocated_claim, gpu, node_slice

Make = Callable[..., Cluster]


def _shareable(*memory: str) -> Any:
    """node-a with one shareable GPU per amount (memory capacity, no request policy)."""
    devices = [
        gpu(
            "node-a",
            i,
            allowMultipleAllocations=True,
            capacity={"memory": {"value": amount}},
            consumesCounters=[],
        )
        for i, amount in enumerate(memory)
    ]
    return node_slice("node-a", devices=devices)


def _share(amount: str, name: str = "gpu") -> Any:
    return request(name, capacity={"requests": {"memory": amount}})


def _all_share(amount: str, name: str = "all") -> Any:
    return request(
        name, count=None, allocationMode="All", capacity={"requests": {"memory": amount}}
    )


def _held(*shares: tuple[str, str]) -> Any:
    """Another claim holding a share of each (device, amount)."""
    claim = allocated_claim("held", *(("node-a", device) for device, _ in shares))
    results = claim["status"]["allocation"]["devices"]["results"]
    for result, (_, amount) in zip(results, shares, strict=True):
        result["shareID"] = f"share-{result['device']}"
        result["consumedCapacity"] = {"memory": amount}
    return claim


def test_allocation_mode_all_allocating_insufficient_fails_instead_of_leaving_a_device_out(
    cluster: Make,
) -> None:
    # the first request takes gpu-0's only Gi: All must still take gpu-0, and cannot
    verdict = cluster(_shareable("1Gi", "1Gi")).check(spec(_share("1Gi"), _all_share("1Gi")))
    assert verdict.outcome == NEVER
    assert [(p.path, p.message) for p in verdict.problems] == [
        (
            "spec.devices.requests[1]",
            "asks for all matching devices (allocationMode All) with capacity {memory: 1Gi}: "
            "the scheduler fixes those devices before the search and must then give each of "
            "them a share, but the pod's other requests take a device or the capacity one of "
            "them needs",
        )
    ]


def test_allocation_mode_all_allocating_sufficient(cluster: Make) -> None:
    verdict = cluster(_shareable("2Gi", "1Gi")).check(spec(_share("1Gi"), _all_share("1Gi")))
    assert verdict.outcome == OK


def test_a_pods_earlier_claim_uses_up_a_device_of_a_later_all_claim(cluster: Make) -> None:
    # the sets of every claim of the pod are fixed before the search, as upstream's Allocate
    c = cluster(_shareable("1Gi", "1Gi"))
    verdict = c.check(spec(_share("1Gi")), spec(_all_share("1Gi")))
    assert verdict.outcome == NEVER
    assert verdict.problems[0].path == "claims[1].spec.devices.requests[0]"
    assert "the pod's other claims take a device" in verdict.problems[0].message
    assert c.check(spec(_all_share("1Gi")), spec(_share("1Gi"))).outcome == NEVER
    assert (
        cluster(_shareable("2Gi", "1Gi"))
        .check(spec(_share("1Gi")), spec(_all_share("1Gi")))
        .outcome
        == OK
    )


def test_allocation_mode_all_in_use_insufficient_leaves_out_what_other_claims_used_up(
    cluster: Make,
) -> None:
    # what other claims hold is known before the search: that device is not in the set
    c = cluster(_shareable("1Gi", "1Gi"), _held(("gpu-0", "1Gi")))
    assert c.check(spec(_all_share("1Gi"))).outcome == OK


def test_allocation_mode_all_in_use_sufficient(cluster: Make) -> None:
    c = cluster(_shareable("2Gi", "1Gi"), _held(("gpu-0", "1Gi")))
    assert c.check(spec(_all_share("1Gi"))).outcome == OK


def test_allocation_mode_all_filter_out_insufficient_capacity(cluster: Make) -> None:
    assert cluster(_shareable("2Gi", "1Gi")).check(spec(_all_share("2Gi"))).outcome == OK


def test_an_earlier_request_on_a_device_other_claims_left_short_is_not_now(
    cluster: Make,
) -> None:
    # gpu-0 has 1 of 2Gi left: the first request takes it, All (fixed as gpu-0 and gpu-1)
    # cannot; once the other claim goes, gpu-0 has room for both
    c = cluster(_shareable("2Gi", "1Gi"), _held(("gpu-0", "1Gi")))
    verdict = c.check(spec(_share("1Gi"), _all_share("1Gi")))
    assert verdict.outcome == NOT_NOW
