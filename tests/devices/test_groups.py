"""Grouped evaluation (one outcome per group of slices alike) gives exactly what evaluating
every device of every slice would, through any sequence of slice changes."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cel.device import devices_of_slice
from app.cel.engine import Engine
from app.cel.errors import CelEvalError
from app.cluster.view import Kind
from app.devices.index import DeviceIndex

DRIVER = "gpu.nvidia.com"
CLASSES = {
    "gpu": ('device.driver == "gpu.nvidia.com"',),
    "healthy": ('device.attributes["gpu.nvidia.com"].healthy == true',),  # errs where absent
    "any": (),
    "bare": ('[device].all(d, d.driver == "gpu.nvidia.com")',),  # reads device bare: no paths
}
SELECTORS = (
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.attributes["gpu.nvidia.com"].model == "H100"',
    'device.attributes["gpu.nvidia.com"].index % 2 == 0',
    'device.attributes["gpu.nvidia.com"].healthy',
    '"gpu.nvidia.com" in device.attributes && device.allowMultipleAllocations == false',
    "device.attributes.size() > 0",
    'device.attributes["other.example.com"].x == 1',  # a domain no device has
    # string comparisons, answered without CEL where the value is a string:
    '"A100" != device.attributes["gpu.nvidia.com"].model',
    "device.attributes['gpu.nvidia.com'].model in ['H100', 'B200']",
    'device.attributes["gpu.nvidia.com"].index == "1"',  # an int: CEL's answer
    'device.attributes["gpu.nvidia.com"].healthy != "yes"',  # absent on some: CEL's error
    'device.attributes["gpu.nvidia.com"].uuid == "x"',  # absent on every device
    '[device].all(d, d.attributes["gpu.nvidia.com"].model == "H100")',  # no paths: per device
    'device.capacity["gpu.nvidia.com"].cores.isGreaterThan(quantity("1"))',  # no such name
)

device_spec = st.fixed_dictionaries(
    {
        "memory": st.sampled_from(["20Gi", "40Gi", "80Gi", "bad quantity"]),
        "model": st.sampled_from(["H100", "A100"]),
        "healthy": st.sampled_from([None, True, False]),
    }
)
slice_spec = st.tuples(st.integers(0, 5), st.lists(device_spec, min_size=0, max_size=4))
steps = st.lists(
    st.one_of(slice_spec, st.tuples(st.integers(0, 5), st.none())), min_size=1, max_size=12
)
questions = st.lists(
    st.tuples(st.sampled_from(sorted(CLASSES)), st.lists(st.sampled_from(SELECTORS), max_size=2)),
    min_size=1,
    max_size=4,
)


def raw_slice(node: int, devices: list[dict[str, Any]], version: int) -> dict[str, Any]:
    entries = []
    for i, spec in enumerate(devices):
        attributes: dict[str, Any] = {"model": {"string": spec["model"]}, "index": {"int": i}}
        if spec["healthy"] is not None:
            attributes["healthy"] = {"bool": spec["healthy"]}
        entries.append(
            {
                "name": f"gpu-{i}",
                "attributes": attributes,
                "capacity": {"memory": {"value": spec["memory"]}},
            }
        )
    return {
        "metadata": {"name": f"node-{node}", "resourceVersion": str(version)},
        "spec": {"driver": DRIVER, "pool": {"name": f"node-{node}"}, "devices": entries},
    }


def outcome(engine: Engine, index: DeviceIndex, expressions: tuple[str, ...], device: Any) -> Any:
    activation = engine.device_activation(device)
    for i, program in enumerate(index.programs(expressions)):
        try:
            result = program.evaluate(activation)
        except CelEvalError as error:
            return i, error.message or "evaluation error"
        if result is not True:
            return False
    return True


def naive(
    engine: Engine,
    index: DeviceIndex,
    slices: list[dict[str, Any]],
    name: str,
    selectors: list[str],
) -> tuple[list[tuple[str, str]], int, list[tuple[str, str]]]:
    """Every device of every slice, in order: matched refs, considered, erring (id, message)."""
    matched, considered, class_errors, errors = [], 0, [], []
    for raw in slices:
        for device in devices_of_slice(raw):
            considered += 1
            if device.problem is not None:
                continue
            found = outcome(engine, index, CLASSES[name], device)
            if found is not True:
                if found is not False:
                    class_errors.append(
                        (device.id, f"class {name}: selector #{found[0]}: {found[1]}")
                    )
                continue
            found = outcome(engine, index, tuple(selectors), device)
            if found is True:
                matched.append((device.slice_name, device.name))
            elif found is not False:
                errors.append((device.id, f"selector #{found[0]}: {found[1]}"))
    return matched, considered, class_errors + errors


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=steps, asked=questions)
def test_grouped_matches_equal_every_device_evaluated(
    engine: Engine,
    steps: list[tuple[int, list[dict[str, Any]] | None]],
    asked: list[tuple[str, list[str]]],
) -> None:
    index = DeviceIndex(engine)
    current: dict[str, dict[str, Any]] = {}
    for version, (node, devices) in enumerate(steps, start=1):
        name = f"node-{node}"
        old = current.get(name)
        if devices is None:
            if old is not None:
                del current[name]
                index.on_change(Kind.RESOURCE_SLICE, old, None)
        else:
            new = raw_slice(node, devices, version)
            current[name] = new
            index.on_change(Kind.RESOURCE_SLICE, old, new)
        order = [s.raw for s in index.slices()]
        for class_name, selectors in asked:
            match = index.matching(class_name, CLASSES[class_name], selectors)
            refs, considered, erring = naive(engine, index, order, class_name, selectors)
            assert [(d.slice_name, d.name) for d in match.devices] == refs
            assert match.count == len(refs)
            assert match.considered == considered
            assert [(d.id, m) for d, m in match.erring] == erring
            every = {(d.slice_name, d.name) for raw in order for d in devices_of_slice(raw)} | {
                ("node-9", "gpu-0")
            }
            assert {ref for ref in every if ref in match.refs} == set(refs)
