"""Consumable capacity as the scheduler computes it (consumable_capacity.go), and what
allocated claims hold."""

from __future__ import annotations

import pytest

from app.allocation.inventory import CapacitySpec
from app.allocation.state import Allocations, consumed
from app.cluster.view import Kind
from app.k8s.quantity import parse_quantity as q
from tests.allocation.nvidia import allocated_claim

RANGE = CapacitySpec(q("80Gi"), q("80Gi"), (), q("1Gi"), q("80Gi"), q("1Gi"), True)
VALUES = CapacitySpec(q("80Gi"), q("10Gi"), (q("10Gi"), q("40Gi"), q("80Gi")), has_policy=True)


@pytest.mark.parametrize(
    ("spec", "requested", "taken"),
    [
        (RANGE, "4000Mi", "4Gi"),  # DESIGN: rounded up to min + n*step
        (RANGE, "100Mi", "1Gi"),  # at least min
        (RANGE, None, "80Gi"),  # not requested: the default
        (VALUES, "11Gi", "40Gi"),  # the smallest valid value at or above
        (VALUES, None, "10Gi"),
        (CapacitySpec(q("80Gi")), None, "80Gi"),  # no policy: the whole value
        (CapacitySpec(q("80Gi")), "3Gi", "3Gi"),
    ],
)
def test_what_a_request_consumes(spec: CapacitySpec, requested: str | None, taken: str) -> None:
    assert consumed(q(requested) if requested else None, spec) == q(taken)


def test_allocations_follow_claim_events() -> None:
    allocations = Allocations()
    whole = allocated_claim("a", ("node-a", "gpu-0"))
    share = allocated_claim(
        "b", ("node-a", "gpu-1"), shareID="s", consumedCapacity={"memory": "8Gi"}
    )
    admin = allocated_claim("c", ("node-a", "gpu-2"), adminAccess=True)
    for claim in (whole, share, admin):
        allocations.on_change(Kind.RESOURCE_CLAIM, None, claim)
    assert allocations.taken(("gpu.nvidia.com", "node-a", "gpu-0"))
    assert allocations.shared[("gpu.nvidia.com", "node-a", "gpu-1")] == {
        "gpu.nvidia.com/memory": q("8Gi")
    }
    assert not allocations.taken(("gpu.nvidia.com", "node-a", "gpu-2"))
    allocations.on_change(Kind.RESOURCE_CLAIM, whole, None)
    allocations.on_change(Kind.RESOURCE_CLAIM, share, None)
    assert not allocations.whole
    assert not allocations.shared
