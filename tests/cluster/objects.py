"""Cluster objects shaped like the ones a real API server and DRA driver publish."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
GPU_DRIVER = "gpu.nvidia.com"


def namespace(name: str, **labels: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/metadata.name": name, **labels},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}" * 50},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def device_class(name: str, extended_resource: str | None = None) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def gpu_device(index: int) -> Obj:
    """One GPU as the NVIDIA DRA driver publishes it: attributes and capacity."""
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "architecture": {"string": "Hopper"},
            "brand": {"string": "Nvidia"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "cudaDriverVersion": {"version": "12.8.0"},
            "driverVersion": {"version": "570.124.6"},
            "index": {"int": index},
            "minor": {"int": index},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-4b1e{index:04x}-9f5c-4c1d-8a2e-0c6f3d1e{index:04x}"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{index:02x}"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def resource_slice(node: str, devices: int, *, first: int = 0) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node}-{GPU_DRIVER}-{first}",
            "generateName": f"{node}-{GPU_DRIVER}-",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": "0f9c-node"}
            ],
        },
        "spec": {
            "driver": GPU_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu_device(first + i) for i in range(devices)],
        },
    }


def claim(name: str, ns: str, *, count: int = 1, allocated: bool = False) -> Obj:
    obj: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": ns,
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": f"{name}-pod", "uid": "7d3a-pod"}
            ],
            "finalizers": ["resource.kubernetes.io/delete-protection"],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": GPU_DRIVER,
                            "allocationMode": "ExactCount",
                            "count": count,
                        },
                    }
                ]
            }
        },
    }
    if allocated:
        obj["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": GPU_DRIVER,
                            "pool": "node-1",
                            "device": f"gpu-{i}",
                            "adminAccess": None,
                        }
                        for i in range(count)
                    ],
                    "config": [],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
                            ]
                        }
                    ]
                },
                "allocationTimestamp": "2026-11-21T06:00:00Z",
            },
            "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": "7d3a-pod"}],
            "devices": [
                {
                    "driver": GPU_DRIVER,
                    "pool": "node-1",
                    "device": f"gpu-{i}",
                    "conditions": [{"type": "Ready", "status": "True"}],
                }
                for i in range(count)
            ],
        }
    return obj


def claim_template(name: str, ns: str, device_class_name: str = GPU_DRIVER) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "dra-webhook"},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class_name}}]
                }
            }
        },
    }


def quota(name: str, ns: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"hard": {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "4"}},
        "status": {
            "hard": {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "4"},
            "used": {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "1"},
        },
    }


def _managed(manager: str, fields: Obj, subresource: str | None = None) -> Obj:
    entry: Obj = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "resource.k8s.io/v1",
        "time": "2026-11-21T06:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def served_claim(i: int) -> Obj:
    """Claim number `i` of a busy cluster as the API server sends it: allocated, reserved by its
    pod, with the managedFields of the controller, the scheduler and the kubelet."""
    obj = claim(f"train-{i}-gpu", f"team-{i % 50}", count=1 + i % 4, allocated=True)
    meta = obj["metadata"]
    meta.update(
        uid=f"6c1f7a52-0d8e-4f2a-9a51-{i:012d}",
        resourceVersion=str(100_000 + i),
        creationTimestamp="2026-11-21T06:00:00Z",
        generateName=f"train-{i}-gpu-",
        labels={"app": f"train-{i % 100}"},
        managedFields=[
            _managed(
                "kube-controller-manager",
                {
                    "f:metadata": {
                        "f:annotations": {".": {}, "f:resource.kubernetes.io/pod-claim-name": {}},
                        "f:generateName": {},
                        "f:ownerReferences": {".": {}, 'k:{"uid":"7d3a-pod"}': {}},
                    },
                    "f:spec": {"f:devices": {"f:requests": {}}},
                },
            ),
            _managed(
                "kube-scheduler",
                {
                    "f:status": {
                        "f:allocation": {".": {}, "f:devices": {".": {}, "f:results": {}}},
                        "f:reservedFor": {".": {}, 'k:{"resource":"pods","uid":"7d3a"}': {}},
                    }
                },
                "status",
            ),
            _managed("kubelet", {"f:status": {"f:devices": {}}}, "status"),
        ],
    )
    return obj


def served_slice(i: int, devices: int = 8) -> Obj:
    """The ResourceSlice of node `i` (`devices` GPUs, unique UUIDs) as the API server sends it."""
    obj = resource_slice(f"node-{i}", devices)
    meta = obj["metadata"]
    meta.update(
        uid=f"1f2e3d4c-0000-4000-8000-{i:012d}",
        resourceVersion=str(200_000 + i),
        creationTimestamp="2026-11-21T06:00:00Z",
        managedFields=[
            _managed(GPU_DRIVER, {"f:spec": {"f:devices": {}, "f:driver": {}, "f:pool": {}}})
        ],
    )
    for device in obj["spec"]["devices"]:
        index = device["attributes"]["index"]["int"]
        device["attributes"]["uuid"] = {"string": f"GPU-{i:08x}-9f5c-4c1d-8a2e-{index:012x}"}
    return obj
