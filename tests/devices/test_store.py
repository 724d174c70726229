"""SliceStore, through the DeviceIndex that is one: devices converted once per slice version,
column numbers renumbered when most go unused, a generation that only moves forward."""

from __future__ import annotations

import pytest

from app.cel.engine import Engine
from app.devices.index import DeviceIndex
from tests.devices.objects import cluster_of_80gi_gpus, gpu_device, make_slice


def test_unchanged_slices_keep_their_converted_devices(engine: Engine) -> None:
    index = DeviceIndex(engine)
    slices = cluster_of_80gi_gpus()
    index.sync(slices, generation=1)
    before = index.devices
    slices["node-b"] = make_slice("node-b", "gpu.nvidia.com", [gpu_device("x", "1Gi")])
    index.sync(slices, generation=2)
    assert all(a is b for a, b in zip(before, index.devices[:4], strict=True))
    slices["node-a"] = make_slice("node-a", "gpu.nvidia.com", [gpu_device("y", "1Gi")], "2")
    index.sync(slices, generation=3)
    assert [d.name for d in index.devices] == ["y", "x"]


def test_column_numbers_are_renumbered_when_replaced_slices_leave_most_unused(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.cluster.view import Kind
    from app.devices import store as store_module

    monkeypatch.setattr(store_module, "COLUMNS_CHECKED_EVERY", 1)
    monkeypatch.setattr(store_module, "COLUMNS_KEPT_MIN", 64)
    index = DeviceIndex(engine)
    selector = 'device.attributes["gpu.nvidia.com"].uuid != "GPU-0-1"'
    old = None
    for round_ in range(200):  # the node's GPUs replaced 200 times: new uuids each time
        devices = [gpu_device(f"g{i}", "80Gi", uuid=f"GPU-{round_}-{i}") for i in range(4)]
        new = make_slice("node-a", "gpu.nvidia.com", devices, version=str(round_))
        index.on_change(Kind.RESOURCE_SLICE, old, new)
        old = new
        match = index.matching("gpu.nvidia.com", (), [selector])
        assert match.count == (3 if round_ == 0 else 4)
        assert len(index._columns) <= 100  # the slice holds 7: 64 kept, then 4x those


def test_a_sync_after_watch_events_never_takes_the_generation_back(engine: Engine) -> None:
    from app.cluster.view import Kind

    index = DeviceIndex(engine)
    a, b = (make_slice(n, "gpu.nvidia.com", [gpu_device("g0", "80Gi")]) for n in "ab")
    index.on_change(Kind.RESOURCE_SLICE, None, a)
    index.on_change(Kind.RESOURCE_SLICE, None, b)
    assert index.matching("gpu.nvidia.com", ()).count == 2
    index.sync({"a": a}, generation=1)  # a caller's own numbering, behind the index's
    assert index.generation > 2
    assert index.matching("gpu.nvidia.com", ()).count == 1
