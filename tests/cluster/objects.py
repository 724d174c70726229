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


def node_labels(i: int, rack: int | None = None) -> dict[str, str]:
    """The labels of a GPU node as a managed cluster and NVIDIA's GPU feature discovery set
    them (about 40: hostname, zone, instance type, the GPU's product, memory, count, MIG...)."""
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": "p5.48xlarge",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": f"gpu-node-{i:05d}",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": f"us-east-1{'abcd'[i % 4]}",
        "topology.k8s.aws/network-node-layer-1": f"nn-{i // 512:04x}",
        "topology.k8s.aws/network-node-layer-2": f"nn-{i // 64:04x}",
        "topology.k8s.aws/network-node-layer-3": f"nn-{i // 16:04x}",
        "eks.amazonaws.com/nodegroup": "gpu-h100",
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
        "feature.node.kubernetes.io/kernel-version.full": "6.1.119-129.201.amzn2023.x86_64",
        "feature.node.kubernetes.io/system-os_release.ID": "amzn",
        "nvidia.com/cuda.driver-version.full": "570.124.06",
        "nvidia.com/cuda.driver.major": "570",
        "nvidia.com/cuda.runtime-version.full": "12.8",
        "nvidia.com/gfd.timestamp": str(1764000000 + i),
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.machine": "p5.48xlarge",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
        "nvidia.com/gpu.deploy.device-plugin": "false",
        "nvidia.com/gpu.deploy.driver": "pre-installed",
        "nvidia.com/gpu.clique": f"cluster-{i // 18:04d}.{i % 18}",
    }
    if rack is not None:
        labels["example.com/rack"] = f"rack-{rack:03d}"
    return labels


def node(i: int, rack: int | None = None, *, version: int | None = None) -> Obj:
    """A Node as the API server stores it: labels, the annotations and managed fields of
    kubelet and the node controllers, and a status (images, conditions, addresses, capacity)
    that is most of its size and none of which the webhook reads."""
    name = f"gpu-node-{i:05d}"
    meta: Obj = {
        "name": name,
        "uid": f"8e2f4c1a-0000-4000-8000-{i:012d}",
        "labels": node_labels(i, rack),
        "annotations": {
            "alpha.kubernetes.io/provided-node-ip": f"10.0.{i // 250}.{i % 250}",
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            "nfd.node.kubernetes.io/feature-labels": "cpu-model.vendor_id,kernel-version.full,"
            "pci-10de.present,system-os_release.ID",
            "csi.volume.kubernetes.io/nodeid": f'{{"ebs.csi.aws.com":"i-{i:017x}"}}',
        },
        "managedFields": [
            _managed("kubelet", {"f:metadata": {"f:labels": {"f:kubernetes.io/hostname": {}}}}),
            _managed("nfd-worker", {"f:metadata": {"f:labels": {".": {}}}}),
            _managed("kubelet", {"f:status": {"f:conditions": {}, "f:images": {}}}, "status"),
        ],
    }
    if version is not None:
        meta["resourceVersion"] = str(version)
    images = [
        {"names": [f"nvcr.io/nvidia/cuda@sha256:{k:064x}", f"nvcr.io/nvidia/cuda:12.{k}"],
         "sizeBytes": 4_000_000_000 + k}
        for k in range(12)
    ]  # fmt: skip
    conditions = [
        {"type": kind, "status": "False", "reason": f"Kubelet{kind}", "message": "ok",
         "lastHeartbeatTime": "2026-11-27T06:00:00Z", "lastTransitionTime": "2026-11-20T06:00:00Z"}
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    ]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": {"providerID": f"aws:///us-east-1a/i-{i:017x}", "podCIDR": "10.244.0.0/24"},
        "status": {
            "capacity": {"cpu": "192", "memory": "2097152Mi", "nvidia.com/gpu": "0", "pods": "110"},
            "allocatable": {"cpu": "191", "memory": "2000000Mi", "pods": "110"},
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"},
                {"type": "Hostname", "address": name},
            ],
            "images": images,
            "nodeInfo": {
                "kubeletVersion": "v1.36.2",
                "containerRuntimeVersion": "containerd://2.1.4",
            },
        },
    }


def pod_holding_claims(
    name: str, *, claims: bool = True, priority: int = 0, uid: str = "u-1"
) -> Obj:
    """A pod as the API server sends it, with what the view has no use for."""
    spec: Obj = {
        "priority": priority,
        "priorityClassName": "low",
        "preemptionPolicy": "PreemptLowerPriority",
        "nodeName": "node-1",
        "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "g"}]}}],
    }
    if claims:
        spec["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "one-gpu"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid,
            "resourceVersion": "7",
            "labels": {"app": "train"},
            "annotations": {"big": "x" * 1000},
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": spec,
        "status": {"phase": "Running", "conditions": [{"type": "Ready"}]},
    }


def priority_class(name: str, value: int, **fields: Any) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "uid": f"pc-{name}", "resourceVersion": "3"},
        "value": value,
        "description": "long text nobody reads here",
        **fields,
    }
