"""ResourceSlices shaped like the NVIDIA DRA driver's, for the allocation model's tests.

One slice per node (pool = node name): whole GPUs (type gpu) and, on GPUs in MIG mode, MIG
devices (type mig) drawing on the GPU's counter set `gpu-<i>-counter-set` (memory,
multiprocessors and eight `memory-slice-<k>` counters of 1, as an H100 has): the whole GPU
consumes all of them, a MIG device its share and the memory slices of its placement (a placement
consuming a counter its set lacks would make the pool invalid, as upstream's allocator holds).
"""

from __future__ import annotations

from typing import Any

from tests.e2e.objects import typed_device_class

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
SLICES = 8
MIG_PROFILES = {"1g.10gb": (1, 16, "10Gi"), "3g.40gb": (4, 60, "40Gi"), "7g.80gb": (7, 132, "80Gi")}


def device_class(name: str, device_type: str) -> Obj:
    return typed_device_class(name, DRIVER, device_type)


CLASSES = [device_class("gpu.nvidia.com", "gpu"), device_class("mig.nvidia.com", "mig")]


def counter_set(node: str, gpu: int) -> Obj:
    counters = {"memory": {"value": "80Gi"}, "multiprocessors": {"value": "132"}}
    counters.update({f"memory-slice-{k}": {"value": "1"} for k in range(SLICES)})
    return {"name": f"gpu-{gpu}-counter-set", "counters": counters}


def gpu(node: str, index: int, *, product: str = "NVIDIA H100 80GB HBM3", **extra: Any) -> Obj:
    consumes = {"memory": {"value": "80Gi"}, "multiprocessors": {"value": "132"}}
    consumes.update({f"memory-slice-{k}": {"value": "1"} for k in range(SLICES)})
    device: Obj = {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "index": {"int": index},
            "uuid": {"string": f"GPU-{node}-{index}"},
            "productName": {"string": product},
            "architecture": {"string": "Hopper"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
        "consumesCounters": [{"counterSet": f"gpu-{index}-counter-set", "counters": consumes}],
    }
    device.update(extra)
    return device


def mig(node: str, parent: int, profile: str, start: int) -> Obj:
    width, processors, memory = MIG_PROFILES[profile]
    consumes = {"memory": {"value": memory}, "multiprocessors": {"value": str(processors)}}
    consumes.update({f"memory-slice-{k}": {"value": "1"} for k in range(start, start + width)})
    return {
        "name": f"gpu-{parent}-mig-{profile.replace('.', '')}-{start}",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile},
            "parentIndex": {"int": parent},
            "uuid": {"string": f"MIG-{node}-{parent}-{start}"},
        },
        "capacity": {"memory": {"value": memory}},
        "consumesCounters": [{"counterSet": f"gpu-{parent}-counter-set", "counters": consumes}],
    }


def node_slice(
    node: str,
    gpus: int = 2,
    *,
    migs: dict[int, list[tuple[str, int]]] | None = None,
    devices: list[Obj] | None = None,
    generation: int = 1,
    slices: int = 1,
    name: str | None = None,
) -> Obj:
    found = devices if devices is not None else [gpu(node, i) for i in range(gpus)]
    for parent, placements in (migs or {}).items():
        found += [mig(node, parent, profile, start) for profile, start in placements]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{DRIVER}", "resourceVersion": str(generation)},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": slices},
            "sharedCounters": [counter_set(node, i) for i in range(max(gpus, 1))],
            "devices": found,
        },
    }


def allocated_claim(name: str, *devices: tuple[str, str], **result: Any) -> Obj:
    """A ResourceClaim allocated the (pool, device) pairs."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "other", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "r", "driver": DRIVER, "pool": pool, "device": d, **result}
                        for pool, d in devices
                    ]
                }
            }
        },
    }
