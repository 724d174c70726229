"""The device index shares outcomes between slices alike (the same sequence of device views) and
hands the allocator its matches slice by slice; slices that differ are evaluated on their own."""

from __future__ import annotations

from typing import Any

from app.cel.cost import Budget
from app.cel.engine import Engine
from app.devices.index import DeviceIndex
from tests.devices.objects import gpu_device, make_slice

MEMORY_80GI = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
CLASS = ('device.driver == "gpu.nvidia.com"',)


def fleet(nodes: int, odd: int) -> dict[str, dict[str, Any]]:
    """``nodes`` slices of 4 alike 80Gi H100s, except node ``odd``: 40Gi on its devices 1 and 3."""
    slices = {}
    for n in range(nodes):
        devices = [
            gpu_device(f"gpu-{i}", "40Gi" if n == odd and i % 2 else "80Gi") for i in range(4)
        ]
        slices[f"node-{n}"] = make_slice(f"node-{n}", "gpu.nvidia.com", devices)
    return slices


def test_slices_alike_share_outcomes_and_a_different_one_is_exact(engine: Engine) -> None:
    index = DeviceIndex(engine)
    index.sync(fleet(50, odd=17), generation=1)
    match = index.matching("gpu.nvidia.com", CLASS, [MEMORY_80GI])
    assert match.count == 50 * 4 - 2
    assert match.considered == 50 * 4
    assert ("node-17", "gpu-0") in match.refs
    assert ("node-17", "gpu-1") not in match.refs
    assert ("node-3", "gpu-1") in match.refs
    assert ("node-99", "gpu-0") not in match.refs
    assert ("node-3",) not in match.refs
    assert [d.name for d in match.devices if d.slice_name == "node-17"] == ["gpu-0", "gpu-2"]


def test_a_changed_slice_is_evaluated_again_and_the_others_keep_their_outcomes(
    engine: Engine,
) -> None:
    index = DeviceIndex(engine)
    slices = fleet(20, odd=-1)
    index.sync(slices, generation=1)
    assert index.matching("gpu.nvidia.com", CLASS, [MEMORY_80GI]).count == 80
    changed = fleet(20, odd=5)["node-5"]
    changed["metadata"]["resourceVersion"] = "2"
    index.sync({**slices, "node-5": changed}, generation=2)
    match = index.matching("gpu.nvidia.com", CLASS, [MEMORY_80GI])
    assert match.count == 78
    assert ("node-5", "gpu-1") not in match.refs
    assert ("node-4", "gpu-1") in match.refs


def test_the_budget_is_charged_once_per_distinct_view_not_per_slice(engine: Engine) -> None:
    index = DeviceIndex(engine)
    index.sync(fleet(200, odd=7), generation=1)
    index.matching("gpu.nvidia.com", CLASS)  # the class's own matches, as at sync
    budget = Budget(10**9)
    index.matching("gpu.nvidia.com", CLASS, [MEMORY_80GI], budget)
    (plan,) = [index._plan((MEMORY_80GI,))]
    assert budget.spent == 2 * plan.cost  # two distinct memories: 80Gi and 40Gi


def test_shapes_reading_the_same_paths_share_one_grouping_and_hold_an_outcome_per_group(
    engine: Engine,
) -> None:
    index = DeviceIndex(engine)
    index.sync(fleet(10, odd=3), generation=1)
    first = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("1Gi")) >= 0'
    second = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("2Gi")) >= 0'
    index.matching("gpu.nvidia.com", CLASS, [first])
    index.matching("gpu.nvidia.com", CLASS, [second])
    one = index._memo.peek(("gpu.nvidia.com", CLASS, (first,)))
    two = index._memo.peek(("gpu.nvidia.com", CLASS, (second,)))
    assert one is not None and two is not None
    assert one.grouping is two.grouping
    assert len(one.outcomes) == len(two.outcomes) == 2  # nine slices alike, and node-3


def test_a_changed_slice_joining_a_known_group_costs_no_evaluation(engine: Engine) -> None:
    index = DeviceIndex(engine)
    slices = fleet(20, odd=5)
    index.sync(slices, generation=1)
    index.matching("gpu.nvidia.com", CLASS, [MEMORY_80GI])
    changed = fleet(20, odd=-1)["node-5"]  # now like the others
    changed["metadata"]["resourceVersion"] = "2"
    index.sync({**slices, "node-5": changed}, generation=2)
    budget = Budget(10**9)
    match = index.matching("gpu.nvidia.com", CLASS, [MEMORY_80GI], budget)
    assert budget.spent == 0
    assert match.count == 80
    back = fleet(20, odd=7)["node-7"]  # like node-5 was: a group known, no evaluation
    back["metadata"]["resourceVersion"] = "3"
    index.sync({**slices, "node-5": changed, "node-7": back}, generation=3)
    assert index.matching("gpu.nvidia.com", CLASS, [MEMORY_80GI], budget).count == 78
    assert budget.spent == 0
    new = make_slice("node-7", "gpu.nvidia.com", [gpu_device(f"gpu-{i}", "20Gi") for i in range(4)])
    new["metadata"]["resourceVersion"] = "4"  # a group never seen: one view, evaluated once
    index.sync({**slices, "node-5": changed, "node-7": new}, generation=4)
    assert index.matching("gpu.nvidia.com", CLASS, [MEMORY_80GI], budget).count == 76
    assert budget.spent == index._plan((MEMORY_80GI,)).cost  # (the class: a known group)
