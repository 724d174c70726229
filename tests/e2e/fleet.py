"""A small GPU fleet, published as the NVIDIA DRA driver (gpu.nvidia.com) would publish it.

Two Nodes, Ready with allocatable cpu/memory/pods (no kubelet runs, so the test sets their status),
and one ResourceSlice per node:

| node | whole GPUs (class gpu.nvidia.com) | MIG devices (class mig.nvidia.com) |
| --- | --- | --- |
| node-a | gpu-0, gpu-1: H100 80GB, memory 80Gi, Hopper, nvlinkDomain 0 | gpu-2-mig-1g10gb-0/1: profile 1g.10gb, memory 10Gi |
| node-b | gpu-0, gpu-1: A100 40GB, memory 40Gi, Ampere (no nvlinkDomain) | gpu-2-mig-3g40gb-0: profile 3g.40gb, memory 40Gi |

DeviceClasses as the driver's Helm chart installs them: `gpu.nvidia.com` and `mig.nvidia.com`,
selecting on `device.driver` and the `type` attribute.

For GPU sharing, node-a also publishes a pool `node-a-shared` with one shareable H100
(`allowMultipleAllocations: true`, memory 80Gi with a `validRange` policy: min 1Gi, step 1Gi,
so a 4000Mi request consumes 4Gi), selected by the class `gpu-shared.nvidia.com`
(`device.allowMultipleAllocations`). The real driver in `--consumable-shares` mode marks every
GPU shareable; here its `type` is `shared-gpu`, so the whole-GPU class and the other journeys'
device counts stay as they were. The policy's default mappings
(`nvidia.com/gpu` -> gpu.nvidia.com, `nvidia.com/mig-<profile>` -> mig.nvidia.com with a
`profile` selector) resolve to these.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.kube import Kube
from tests.e2e.objects import typed_device_class

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
NODES = ("node-a", "node-b")
GPUS_PER_NODE = 2


def device_class(name: str, device_type: str) -> Obj:
    return typed_device_class(name, DRIVER, device_type)


def _gpu(name: str, product: str, memory: str, architecture: str, index: int, **extra: Obj) -> Obj:
    attributes: Obj = {
        "type": {"string": "gpu"},
        "productName": {"string": product},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": architecture},
        "index": {"int": index},
        "driverVersion": {"version": "580.65.6"},
        "uuid": {"string": f"GPU-{name}-{product[-4:].lower()}"},
        **extra,
    }
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}


def _mig(name: str, profile: str, memory: str, product: str) -> Obj:
    attributes: Obj = {
        "type": {"string": "mig"},
        "profile": {"string": profile},
        "productName": {"string": product},
        "driverVersion": {"version": "580.65.6"},
        "parentIndex": {"int": 2},
    }
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}


def resource_slice(node: str) -> Obj:
    if node == "node-a":
        product = "NVIDIA H100 80GB HBM3"
        devices = [
            _gpu(f"gpu-{i}", product, "80Gi", "Hopper", i, nvlinkDomain={"int": 0})
            for i in range(GPUS_PER_NODE)
        ]
        devices += [_mig(f"gpu-2-mig-1g10gb-{i}", "1g.10gb", "10Gi", product) for i in range(2)]
    else:
        product = "NVIDIA A100-SXM4-40GB"
        devices = [_gpu(f"gpu-{i}", product, "40Gi", "Ampere", i) for i in range(GPUS_PER_NODE)]
        devices.append(_mig("gpu-2-mig-3g40gb-0", "3g.40gb", "40Gi", product))
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


SHARED_CLASS = "gpu-shared.nvidia.com"
SHARED_POOL = "node-a-shared"


def shared_slice() -> Obj:
    device: Obj = {
        "name": "gpu-s0",
        "allowMultipleAllocations": True,
        "attributes": {
            "type": {"string": "shared-gpu"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "driverVersion": {"version": "580.65.6"},
        },
        "capacity": {
            "memory": {
                "value": "80Gi",
                "requestPolicy": {
                    "default": "80Gi",
                    "validRange": {"min": "1Gi", "max": "80Gi", "step": "1Gi"},
                },
            }
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{SHARED_POOL}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-a",
            "pool": {"name": SHARED_POOL, "generation": 1, "resourceSliceCount": 1},
            "devices": [device],
        },
    }


SHARING_SINCE = 36
"""Consumable capacity (DRAConsumableCapacity) is on by default from 1.36: before, the API server
drops `allowMultipleAllocations` from slices and its CEL knows no such field."""


def shared_class(minor: int = SHARING_SINCE) -> Obj:
    """The shareable GPUs' class; before 1.36, the same device by its `type` (the field is
    unknown to that release's CEL: a class naming it is refused)."""
    if minor >= SHARING_SINCE:
        expression = f'device.driver == "{DRIVER}" && device.allowMultipleAllocations'
    else:
        expression = (
            f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "shared-gpu"'
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": SHARED_CLASS},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }


_STATUS: Obj = {
    "status": {
        "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
        "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "set by the control-plane tests (no kubelet runs)",
            }
        ],
    }
}


def publish(kube: Kube, minor: int) -> None:
    """Nodes Ready and untainted, their ResourceSlices (and the shareable GPU's), the
    DeviceClasses, as Kubernetes 1.<minor> takes them."""
    for name in NODES:
        kube.apply(node(name))
        # The TaintNodesByCondition admission plugin taints every new Node not-ready; the node
        # lifecycle controller would lift it once Ready, but it does not run here.
        kube.patch("Node", name, None, {"spec": {"taints": None}})
        kube.patch("Node", name, None, _STATUS, subresource="status")
        kube.apply(resource_slice(name))
    kube.apply(shared_slice())
    kube.apply(device_class("gpu.nvidia.com", "gpu"))
    kube.apply(device_class("mig.nvidia.com", "mig"))
    kube.apply(shared_class(minor))
