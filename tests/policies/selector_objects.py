"""Objects and one review through the real ASGI app, shared by the selector and satisfiability
tests: a GPU DeviceClass, slices of GPUs of given memory, claims with CEL selectors."""

from __future__ import annotations

from typing import Any

from app.config import Policy
from tests.helpers import DEMO_NAMESPACES, AppHarness, policy_from, wrap

Obj = dict[str, Any]
MEMORY_OVER_200GI = 'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("200Gi"))'
H100 = 'device.attributes["gpu.nvidia.com"].model == "H100"'
NET = 'device.attributes["dra.net"]'
BACKENDS = ["cel-expr-python", "cel-python"]


def device_class(name: str = "gpu.nvidia.com", expression: str | None = None) -> Obj:
    expression = expression or f'device.driver == "{name}"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def resource_slice(node: str, *memories: str, model: str = "H100") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com", "resourceVersion": "1"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"model": {"string": model}},
                    "capacity": {"memory": {"value": memory}},
                }
                for i, memory in enumerate(memories)
            ],
        },
    }


def exactly(*selectors: str, count: int = 1, device_class_name: str = "gpu.nvidia.com") -> Obj:
    return {
        "deviceClassName": device_class_name,
        "count": count,
        "selectors": [{"cel": {"expression": s}} for s in selectors],
    }


def claim(*requests: Obj, namespace: str = "default", name: str = "big") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": list(requests)}},
    }


def request(name: str = "gpu", **body: Any) -> Obj:
    return {"name": name, **body}


EIGHTY_GI_CLUSTER = [*DEMO_NAMESPACES, device_class(), resource_slice("node-a", *["80Gi"] * 4)]
BIG_GPU_CLUSTER = [*DEMO_NAMESPACES, device_class(), resource_slice("node-b", "141Gi", "288Gi")]


def answer(harness: AppHarness, obj: Obj) -> Obj:
    return harness.answer("validate", wrap(obj))


def on(backend: str, extra: str = "") -> Policy:
    return policy_from(f"cel:\n  backend: {backend}\n{extra}")
