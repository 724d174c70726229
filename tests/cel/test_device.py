"""Device values built from raw ResourceSlices."""

from typing import Any

from app.cel.device import devices_of_slice, split_qualified_name
from app.cel.semver import parse_semver
from app.k8s.quantity import parse_quantity


def test_bare_names_belong_to_the_driver_domain_and_qualified_names_to_theirs() -> None:
    assert split_qualified_name("model", "gpu.nvidia.com") == ("gpu.nvidia.com", "model")
    assert split_qualified_name("gpu.example.com/x", "gpu.nvidia.com") == ("gpu.example.com", "x")


def test_device_values_are_typed_from_the_slice(gpu: Any) -> None:
    assert gpu.id == "gpu.nvidia.com/node-1/gpu-0"
    assert gpu.attributes["gpu.nvidia.com"]["model"] == "H100"
    assert gpu.attributes["gpu.nvidia.com"]["index"] == 0
    assert gpu.attributes["gpu.nvidia.com"]["driverVersion"] == parse_semver("550.54.15")
    assert gpu.attributes["gpu.example.com"]["healthy"] is True
    assert gpu.capacity["gpu.nvidia.com"]["memory"] == parse_quantity("80Gi")
    assert gpu.capacity["gpu.example.com"]["memory"] == parse_quantity("48Gi")
    assert gpu.allow_multiple_allocations is False
    assert gpu.problem is None


def test_v1beta1_basic_devices_are_read_too() -> None:
    raw = {
        "metadata": {"name": "s"},
        "spec": {
            "driver": "d.example.com",
            "pool": {"name": "p"},
            "devices": [{"name": "x", "basic": {"capacity": {"slots": {"value": "4"}}}}],
        },
    }
    (device,) = devices_of_slice(raw)
    assert device.capacity["d.example.com"]["slots"] == parse_quantity("4")


def test_unusable_values_mark_the_device_and_malformed_entries_are_skipped() -> None:
    raw = {
        "metadata": {"name": "s"},
        "spec": {
            "driver": "d",
            "devices": [
                {"name": "v", "attributes": {"a": {"version": "1.0"}}},
                {"name": "q", "capacity": {"c": {"value": "lots"}}},
                {"name": "e", "attributes": {"a": {}}},
                "not a device",
                {"attributes": {}},
            ],
        },
    }
    devices = list(devices_of_slice(raw))
    assert [d.name for d in devices] == ["v", "q", "e"]
    assert all(d.problem for d in devices)
    assert list(devices_of_slice({"spec": None})) == []
