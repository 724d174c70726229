"""DeviceIndex: which devices a class + selectors match, memoized per generation."""

from __future__ import annotations

from typing import Any

import pytest

from app.cel.device import devices_of_slice
from app.cel.engine import Engine
from app.cel.errors import CelCompileError
from app.devices.index import DeviceIndex, class_selectors
from tests.devices.objects import cluster_of_80gi_gpus, gpu_device, make_slice

GPU_CLASS: dict[str, Any] = {
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]},
}
MEMORY_OVER_200GI = 'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("200Gi"))'


def test_class_selectors_are_read_from_a_raw_device_class() -> None:
    assert class_selectors(GPU_CLASS) == ('device.driver == "gpu.nvidia.com"',)
    assert class_selectors(None) == ()
    assert class_selectors({"spec": {"selectors": [{"cel": {}}]}}) == ()


def test_claim_asking_more_memory_than_any_gpu_matches_nothing(engine: Engine) -> None:
    index = DeviceIndex(engine)
    index.sync(cluster_of_80gi_gpus(), generation=1)
    match = index.matching("gpu.nvidia.com", class_selectors(GPU_CLASS), [MEMORY_OVER_200GI])
    assert match.count == 0
    assert match.considered == 4


def test_same_claim_matches_the_141gi_and_288gi_devices(engine: Engine) -> None:
    slices = {
        "node-b": make_slice(
            "node-b",
            "gpu.nvidia.com",
            [gpu_device("gpu-0", "141Gi", "H200"), gpu_device("gpu-1", "288Gi", "B300")],
        )
    }
    index = DeviceIndex(engine)
    index.sync(slices, generation=1)
    match = index.matching("gpu.nvidia.com", class_selectors(GPU_CLASS), [MEMORY_OVER_200GI])
    assert [d.name for d in match.devices] == ["gpu-1"]
    match = index.matching(
        "gpu.nvidia.com",
        class_selectors(GPU_CLASS),
        ['device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("141Gi")) >= 0'],
    )
    assert [d.name for d in match.devices] == ["gpu-0", "gpu-1"]


def test_repeated_question_is_answered_from_the_memo(engine: Engine) -> None:
    index = DeviceIndex(engine)
    index.sync(cluster_of_80gi_gpus(), generation=1)
    first = index.matching("gpu.nvidia.com", class_selectors(GPU_CLASS), [MEMORY_OVER_200GI])
    hits = index.memo_hits
    again = index.matching("gpu.nvidia.com", class_selectors(GPU_CLASS), [MEMORY_OVER_200GI])
    assert again is first
    assert index.memo_hits == hits + 1


def test_new_generation_forgets_the_memo_and_sees_new_devices(engine: Engine) -> None:
    index = DeviceIndex(engine)
    slices = cluster_of_80gi_gpus()
    index.sync(slices, generation=1)
    assert index.matching("c", (), [MEMORY_OVER_200GI]).count == 0
    slices["node-b"] = make_slice("node-b", "gpu.nvidia.com", [gpu_device("big", "288Gi")])
    index.sync(slices, generation=1)  # same generation: nothing changes
    assert index.matching("c", (), [MEMORY_OVER_200GI]).count == 0
    index.sync(slices, generation=2)
    assert [d.name for d in index.matching("c", (), [MEMORY_OVER_200GI]).devices] == ["big"]


def test_unknown_attribute_counts_as_no_match_with_the_error_kept(engine: Engine) -> None:
    slices = {
        "s": make_slice(
            "s",
            "gpu.nvidia.com",
            [gpu_device("a", "80Gi", profile="1g.10gb"), gpu_device("b", "80Gi")],
        )
    }
    index = DeviceIndex(engine)
    index.sync(slices, generation=1)
    match = index.matching("c", (), ['device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'])
    assert [d.name for d in match.devices] == ["a"]
    assert match.errors == 1
    assert match.first_error is not None and match.first_error.startswith("gpu.nvidia.com/s/b")


def test_grouped_evaluation_agrees_with_evaluating_every_device(engine: Engine) -> None:
    devices = [
        gpu_device(f"g{i}", ["40Gi", "80Gi", "141Gi"][i % 3], ["A100", "H100"][i % 2], index=i)
        for i in range(30)
    ]
    slices = {"s": make_slice("s", "gpu.nvidia.com", devices)}
    index = DeviceIndex(engine)
    index.sync(slices, generation=1)
    selectors = [
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0',
        'device.attributes["gpu.nvidia.com"].model == "H100"',
    ]
    grouped = {d.name for d in index.matching("c", (), selectors).devices}
    ungrouped = {
        d.name
        for d in devices_of_slice(slices["s"])
        if all(
            engine.compile(s, index.programs([s])[0].environment).evaluate(
                engine.device_activation(d)
            )
            for s in selectors
        )
    }
    assert grouped == ungrouped
    assert len(grouped) == 10


def test_selector_that_does_not_compile_raises(engine: Engine) -> None:
    index = DeviceIndex(engine)
    index.sync(cluster_of_80gi_gpus(), generation=1)
    with pytest.raises(CelCompileError):
        index.matching("c", (), ["device.driver =="])


def test_devices_with_unusable_values_never_match(engine: Engine) -> None:
    bad = {"name": "bad", "attributes": {"v": {"version": "not-semver"}}}
    index = DeviceIndex(engine)
    index.sync([make_slice("s", "d", [bad, {"name": "good"}])], generation=1)
    assert [d.name for d in index.matching("c", (), ["true"]).devices] == ["good"]


def test_selectors_reading_made_up_paths_leave_no_trace_per_slice(engine: Engine) -> None:
    from app.devices import index as index_module

    index = DeviceIndex(engine)
    index.sync([make_slice("s", "gpu.nvidia.com", [gpu_device("g0", "80Gi")])], 1)
    (indexed,) = index.slices()
    published = set(indexed.columns)
    for i in range(index_module.VIEWS_KEPT + 50):
        domain = f"d{i}.example.com"
        index.matching("gpu.nvidia.com", (), (f'device.attributes["{domain}"].x == {i}',))
    assert len(index._views) <= index_module.VIEWS_KEPT
    assert len(index._groupings) <= index_module.GROUPINGS_KEPT
    assert set(indexed.columns) == published  # a path no device has is never stored


def test_the_match_memo_evicts_the_oldest_results_to_stay_within_its_byte_budget(
    engine: Engine,
) -> None:
    budget = 40 * 1024  # each result holds ~15 KB: the positions of 399 of 400 devices
    index = DeviceIndex(engine, max_bytes=budget)
    index.sync(cluster_of_80gi_gpus(400), generation=1)
    asked = [f'device.attributes["gpu.nvidia.com"].uuid != "GPU-{i}"' for i in range(5)]
    for selector in asked:
        assert index.matching("gpu.nvidia.com", [], [selector]).count == 399
    memo = index._memo
    assert 0 < memo.bytes <= budget
    assert memo.evictions >= 3
    misses = index.memo_misses
    index.matching("gpu.nvidia.com", [], [asked[-1]])  # the newest is kept
    assert index.memo_misses == misses
    index.matching("gpu.nvidia.com", [], [asked[0]])  # the oldest went
    assert index.memo_misses == misses + 1


def test_a_requests_match_keeps_the_class_errors_under_a_small_byte_budget(
    engine: Engine,
) -> None:
    index = DeviceIndex(engine, max_bytes=3000)  # the class's own result does not fit
    devices = [gpu_device(f"g{i}", "80Gi") for i in range(40)]
    devices[0]["attributes"]["healthy"] = {"bool": True}
    index.sync([make_slice("node-a", "gpu.nvidia.com", devices)], generation=1)
    healthy = ('device.attributes["gpu.nvidia.com"].healthy == true',)  # errs where absent
    match = index.matching(
        "healthy", healthy, ['device.attributes["gpu.nvidia.com"].model == "H100"']
    )
    assert match.errors == 39
    assert match.first_error is not None and "node-a/g1" in match.first_error


def test_a_shape_drops_the_outcomes_of_groups_no_slice_is_in(engine: Engine) -> None:
    from app.cluster.view import Kind
    from app.devices import index as index_module

    index = DeviceIndex(engine)
    bare = ('[device].all(d, d.driver == "gpu.nvidia.com")',)  # each slice version alone
    old = None
    for version in range(200):
        new = make_slice("node-a", "gpu.nvidia.com", [gpu_device("g0", "80Gi")], str(version))
        index.on_change(Kind.RESOURCE_SLICE, old, new)
        old = new
        assert index.matching("gpu.nvidia.com", bare).count == 1
    shape = index._memo.peek(("gpu.nvidia.com", bare, ()))
    assert shape is not None
    assert len(shape.outcomes) <= 2 + index_module.OUTCOMES_SLACK


class _Raw(dict[str, Any]):
    """A raw slice that can be weakly referenced."""


def test_a_replaced_slice_is_freed_without_the_cycle_collector(engine: Engine) -> None:
    import gc
    import weakref

    gc.collect()
    gc.disable()  # as after the sync: what a cycle holds would stay (and frozen: for good)
    try:
        index = DeviceIndex(engine)
        first = _Raw(make_slice("node-a", "gpu.nvidia.com", [gpu_device("g0", "80Gi")]))
        index.sync([first], generation=1)
        index.matching("gpu.nvidia.com", ('device.driver == "gpu.nvidia.com"',))
        freed = weakref.ref(first)
        del first
        index.sync([make_slice("node-a", "gpu.nvidia.com", [], "2")], generation=2)
        index._memo.clear()  # the shape goes (evicted) with its match of the first slice
        index.matching("gpu.nvidia.com", ('device.driver == "gpu.nvidia.com"',))
        assert freed() is None
    finally:
        gc.enable()


def test_a_grouping_evicted_from_its_cache_takes_the_shapes_holding_it_along(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a shape holds its grouping, which its own byte count leaves out: hostile distinct path
    # sets must not keep alive every grouping the groupings cache has let go
    monkeypatch.setattr("app.devices.index.GROUPINGS_KEPT", 2)
    index = DeviceIndex(engine)
    index.sync(cluster_of_80gi_gpus(), generation=1)
    match_class = ['device.driver == "gpu.nvidia.com"']
    for i in range(6):
        selector = f'device.attributes["gpu.nvidia.com"].attr{i} == "x"'  # a path of its own
        assert index.matching("gpu.nvidia.com", match_class, [selector]).count == 0
    held = {id(shape.grouping) for _, shape in index._memo.items()}
    alive = {id(g) for _, g in index._groupings.items()}
    assert held <= alive
    assert len(index._memo) <= 3  # the class's own shape and the shapes of the 2 groupings kept
