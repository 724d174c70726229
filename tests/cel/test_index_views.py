"""The device index shares outcomes between slices alike (the same sequence of device views) and
hands the allocator its matches slice by slice; slices that differ are evaluated on their own."""

from __future__ import annotations

from typing import Any

from app.cel.cost import Budget
from app.cel.engine import Engine
from app.cel.index import DeviceIndex
from tests.cel.test_index import gpu_device, make_slice

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


def test_shapes_share_the_part_of_a_slice_whose_devices_all_match(engine: Engine) -> None:
    index = DeviceIndex(engine)
    index.sync(fleet(10, odd=3), generation=1)
    first = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("1Gi")) >= 0'
    second = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("2Gi")) >= 0'
    index.matching("gpu.nvidia.com", CLASS, [first])
    index.matching("gpu.nvidia.com", CLASS, [second])
    one = index._memo.peek(("gpu.nvidia.com", CLASS, (first,)))
    two = index._memo.peek(("gpu.nvidia.com", CLASS, (second,)))
    assert one is not None and two is not None
    assert one.parts["node-0"] is two.parts["node-0"]
    assert one.parts["node-3"].devices == two.parts["node-3"].devices
