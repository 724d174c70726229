"""Raw ResourceSlices for the device index's tests: a slice of given devices, a GPU device
with a memory capacity and a model attribute, a node of 80Gi GPUs."""

from __future__ import annotations

from typing import Any


def make_slice(
    name: str, driver: str, devices: list[dict[str, Any]], version: str = "1"
) -> dict[str, Any]:
    """A raw v1 ResourceSlice with the given devices."""
    return {
        "metadata": {"name": name, "resourceVersion": version},
        "spec": {"driver": driver, "pool": {"name": name}, "devices": devices},
    }


def gpu_device(name: str, memory: str, model: str = "H100", **attributes: Any) -> dict[str, Any]:
    """A raw v1 device entry with a memory capacity and a model attribute."""
    attrs: dict[str, Any] = {"model": {"string": model}}
    for key, value in attributes.items():
        kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
        attrs[key] = {kind: value}
    return {"name": name, "attributes": attrs, "capacity": {"memory": {"value": memory}}}


def cluster_of_80gi_gpus(count: int = 4) -> dict[str, Any]:
    """One slice, node-a, of ``count`` 80Gi H100s with uuids GPU-0, GPU-1, ..."""
    devices = [gpu_device(f"gpu-{i}", "80Gi", uuid=f"GPU-{i}") for i in range(count)]
    return {"node-a": make_slice("node-a", "gpu.nvidia.com", devices)}
