"""A small cluster for the DeviceTaintRule tests: two nodes of GPUs, claims holding some of them,
the pods that use those claims, and rules as a platform team writes them."""

from __future__ import annotations

from typing import Any

from tests.helpers import namespace

Obj = dict[str, Any]
DRIVER = "gpu.example.com"
OTHER_DRIVER = "fpga.example.com"


def device_slice(node: str, count: int, driver: str = DRIVER, model: str = "H100") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"model": {"string": model}, "index": {"int": i}},
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(count)
            ],
        },
    }


def held_claim(
    ns: str,
    name: str,
    devices: list[tuple[str, str]],
    pods: list[str],
    *,
    driver: str = DRIVER,
    tolerations: list[Obj] | None = None,
    groups: list[str] = (),  # type: ignore[assignment]
) -> Obj:
    """An allocated claim holding (pool, device) of `driver`, reserved for `pods`."""
    results = []
    for pool, device in devices:
        result: Obj = {"request": "gpu", "driver": driver, "pool": pool, "device": device}
        if tolerations is not None:
            result["tolerations"] = tolerations
        results.append(result)
    reserved = [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods]
    reserved += [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": g, "uid": f"uid-{g}"}
        for g in groups
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": reserved,
        },
    }


def rule(
    name: str,
    selector: Obj | None,
    effect: str = "NoExecute",
    *,
    version: str = "v1",
    key: str = "example.com/maintenance",
    value: str = "",
) -> Obj:
    spec: Obj = {"taint": {"key": key, "effect": effect}}
    if value:
        spec["taint"]["value"] = value
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def cluster() -> list[Obj]:
    """node-a: 4 GPUs, node-b: 4 GPUs, one FPGA on node-a. ml-a: 3 pods on node-a (one claim
    of two GPUs shared by two pods, one of one GPU), ml-b: one pod on node-b, ml-c: one pod on
    node-b whose claim tolerates NoExecute maintenance for ever."""
    return [
        namespace("ml-a"),
        namespace("ml-b"),
        namespace("ml-c"),
        namespace("dra-webhook"),
        namespace("kube-system"),
        device_slice("node-a", 4),
        device_slice("node-b", 4),
        device_slice("node-a", 1, driver=OTHER_DRIVER),
        held_claim("ml-a", "pair", [("node-a", "gpu-0"), ("node-a", "gpu-1")], ["a-0", "a-1"]),
        held_claim("ml-a", "one", [("node-a", "gpu-2")], ["a-2"]),
        held_claim("ml-b", "one", [("node-b", "gpu-0")], ["b-0"]),
        held_claim(
            "ml-c",
            "patient",
            [("node-b", "gpu-1")],
            ["c-0"],
            tolerations=[
                {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}
            ],
        ),
    ]
