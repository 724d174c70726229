"""Manifests the journeys create, and what they read back: where a pod ran, what its claims got."""

from __future__ import annotations

import copy
from typing import Any

from tests.e2e.kube import Kube

Obj = dict[str, Any]
IMAGE = "registry.k8s.io/pause:3.10"


def container(name: str = "app", *, limits: Obj | None = None, claims: tuple[str, ...] = ()) -> Obj:
    resources: Obj = {"requests": {"cpu": "10m"}}
    if limits:
        resources["limits"] = dict(limits)
    if claims:
        resources["claims"] = [{"name": c} for c in claims]
    return {"name": name, "image": IMAGE, "resources": resources}


def pod_spec(
    *containers: Obj, init: list[Obj] | None = None, claims: list[Obj] | None = None
) -> Obj:
    spec: Obj = {"containers": list(containers), "terminationGracePeriodSeconds": 0}
    if init:
        spec["initContainers"] = init
    if claims:
        spec["resourceClaims"] = claims
    return spec


def pod(name: str, namespace: str, spec: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": copy.deepcopy(spec),
    }


def deployment(name: str, namespace: str, spec: Obj, replicas: int = 1) -> Obj:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": copy.deepcopy(spec)},
        },
    }


def cronjob(name: str, namespace: str, spec: Obj) -> Obj:
    spec = {**copy.deepcopy(spec), "restartPolicy": "Never"}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedule": "@yearly", "jobTemplate": {"spec": {"template": {"spec": spec}}}},
    }


def typed_device_class(name: str, driver: str, device_type: str) -> Obj:
    """A DeviceClass selecting the devices of `driver` whose `type` attribute is `device_type`
    (the NVIDIA driver publishes `gpu` and `mig`)."""
    expression = (
        f'device.driver == "{driver}" && device.attributes["{driver}"].type == "{device_type}"'
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def exactly(device_class: str | None = "gpu.nvidia.com", count: int = 1, *selectors: str) -> Obj:
    body: Obj = {"count": count}
    if device_class is not None:
        body["deviceClassName"] = device_class
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return body


def claim_spec(*requests: Obj) -> Obj:
    return {
        "devices": {"requests": [{"name": f"r{i}", "exactly": r} for i, r in enumerate(requests)]}
    }


def claim(name: str, namespace: str, spec: Obj) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def claim_template(name: str, namespace: str, spec: Obj) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": spec},
    }


def scheduled(kube: Kube, namespace: str, name: str, timeout: float = 30) -> Obj:
    """The pod once the scheduler bound it to a node."""
    return kube.wait(
        lambda: (p := kube.find("Pod", name, namespace)) and p["spec"].get("nodeName") and p,
        f"pod {namespace}/{name} to be scheduled",
        timeout,
    )


def unschedulable(pod_obj: Obj) -> str | None:
    """The scheduler's reason when it gave up on the pod for now (Unschedulable, SchedulerError)."""
    for condition in pod_obj.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return f"{condition.get('reason')}: {condition.get('message', '')}"
    return None


def claims_of(kube: Kube, pod_obj: Obj) -> dict[str, Obj] | None:
    """The ResourceClaims a pod uses by pod-level name, generated from templates or named, as
    stored; None while the resourceclaim controller has not made them all yet."""
    namespace = pod_obj["metadata"]["namespace"]
    generated = {
        s["name"]: s.get("resourceClaimName")
        for s in pod_obj.get("status", {}).get("resourceClaimStatuses", [])
    }
    found = {}
    for entry in pod_obj["spec"].get("resourceClaims", []):
        name = entry.get("resourceClaimName") or generated.get(entry["name"])
        stored = kube.find("ResourceClaim", name, namespace) if name else None
        if stored is None:
            return None
        found[entry["name"]] = stored
    return found


def allocated_claims(kube: Kube, namespace: str, name: str, timeout: float = 30) -> dict[str, Obj]:
    """A pod's claims, once each has its allocation from the scheduler."""

    def fetch() -> dict[str, Obj] | None:
        claims = claims_of(kube, kube.get("Pod", name, namespace))
        return claims if claims and all(allocated_devices(c) for c in claims.values()) else None

    return kube.wait(fetch, f"the claims of pod {namespace}/{name} to be allocated", timeout)


def allocated_devices(claim_obj: Obj) -> list[tuple[str, str, str]]:
    """(request, pool, device) of each device the scheduler allocated to the claim."""
    allocation = claim_obj.get("status", {}).get("allocation") or {}
    return [
        (r["request"], r["pool"], r["device"])
        for r in allocation.get("devices", {}).get("results", [])
    ]


def pod_outcome(kube: Kube, namespace: str, name: str) -> str | None:
    """`allocated` (bound, its claim allocated), `unschedulable`, or None while neither."""
    pod = kube.get("Pod", namespace=namespace, name=name)
    if pod["spec"].get("nodeName"):
        claim = kube.get("ResourceClaim", name, namespace)
        return "allocated" if allocated_devices(claim) else None
    return "unschedulable" if unschedulable(pod) else None


def settle_outcome(kube: Kube, namespace: str, name: str, seconds: float = 10) -> str:
    """`allocated` if the pod's claim is allocated within `seconds` (a late allocation), else
    `unschedulable`. The scheduler retries an unschedulable pod after a backoff (1 s doubling
    to 10 s) or when a claim it waits on changes; on a busy machine a retry that follows the
    previous claim's deletion took more than the 3 s this once waited (CI, 1.34.12, seed
    20261124, claim #50; allocated when run again)."""
    try:
        return kube.wait(
            lambda: pod_outcome(kube, namespace, name) == "allocated" and "allocated",
            "a late allocation",
            seconds,
        )
    except AssertionError:
        return "unschedulable"
