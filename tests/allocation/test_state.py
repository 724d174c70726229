"""What allocated claims hold."""

from __future__ import annotations

from app.allocation.state import Allocations
from app.cluster.view import Kind
from app.k8s.quantity import parse_quantity as q
from tests.allocation.nvidia import allocated_claim


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
