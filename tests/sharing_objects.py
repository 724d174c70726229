"""Cluster objects shaped like real shareable GPUs, for the GPU-sharing tests.

- `gpu.nvidia.com` slices on node-a: two H100s with `allowMultipleAllocations`, memory 80Gi
  with a `validRange` policy (min 1Gi, step 1Gi: a 4000Mi request consumes 4Gi), as the NVIDIA
  driver publishes in `--consumable-shares=memory` mode but with a coarser step, plus `shares`
  (1..4, as in mode N) so time-slicing replicas have a capacity to ask for;
- a `gpu.example.com` slice on node-b: one 40Gi device whose memory takes `validValues`
  (10Gi, 20Gi, 40Gi);
- DeviceClasses `gpu-shared.nvidia.com` (NVIDIA devices that allow multiple allocations) and
  `shared.example.com`;
- pods asking for shares in ml-research, and a pipeline over the demo namespaces and these
  objects to review them with.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.config.policy import Policy
from app.pipeline import Decision, Endpoint, Pipeline
from app.transport.review import decode_review
from tests.helpers import DEMO_NAMESPACES, make_pipeline, wrap

Obj = dict[str, Any]
SHARED = "gpu-shared.nvidia.com"
NS = "ml-research"


def device_class(name: str, expression: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def h100(name: str) -> Obj:
    return {
        "name": name,
        "allowMultipleAllocations": True,
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": "H100"}},
        "capacity": {
            "memory": {
                "value": "80Gi",
                "requestPolicy": {
                    "default": "80Gi",
                    "validRange": {"min": "1Gi", "max": "80Gi", "step": "1Gi"},
                },
            },
            "shares": {
                "value": "4",
                "requestPolicy": {
                    "default": "1",
                    "validRange": {"min": "1", "max": "4", "step": "1"},
                },
            },
        },
    }


def valid_values_device(name: str) -> Obj:
    return {
        "name": name,
        "allowMultipleAllocations": True,
        "attributes": {"model": {"string": "A100"}},
        "capacity": {
            "memory": {
                "value": "40Gi",
                "requestPolicy": {"default": "40Gi", "validValues": ["10Gi", "20Gi", "40Gi"]},
            }
        },
    }


def resource_slice(name: str, driver: str, node: str, devices: list[Obj]) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def sharing_cluster() -> list[Obj]:
    return [
        device_class(
            SHARED, 'device.driver == "gpu.nvidia.com" && device.allowMultipleAllocations'
        ),
        device_class("shared.example.com", 'device.driver == "gpu.example.com"'),
        resource_slice(
            "node-a-gpu.nvidia.com", "gpu.nvidia.com", "node-a", [h100("gpu-0"), h100("gpu-1")]
        ),
        resource_slice(
            "node-b-gpu.example.com", "gpu.example.com", "node-b", [valid_values_device("gpu-0")]
        ),
    ]


def container(name: str, limits: Obj, **extra: Any) -> Obj:
    """As the API server sends it: limits copied into requests, amounts canonicalized."""
    return {
        "name": name,
        "image": "cuda:12",
        "resources": {"limits": dict(limits), "requests": dict(limits)},
        **extra,
    }


def pod(*containers: Obj, ns: str = NS, init: tuple[Obj, ...] = ()) -> Obj:
    spec: Obj = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns},
        "spec": spec,
    }


def pipeline(policy: Policy | None = None, objects: list[Obj] | None = None) -> Pipeline:
    return make_pipeline([*DEMO_NAMESPACES, *sharing_cluster(), *(objects or [])], policy)


def decide(p: Pipeline, obj: Obj, endpoint: Endpoint = Endpoint.MUTATE, **kw: Any) -> Decision:
    return p.review(endpoint, decode_review(orjson.dumps(wrap(obj, **kw))))
