"""Builders for the DRA objects the claim tests admit: claims, templates, pods and workloads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

GPU = "gpu.nvidia.com"
CLUSTER_FILE = Path(__file__).resolve().parent / "data" / "claims-cluster.yaml"
POLICY_FILE = Path(__file__).resolve().parent / "data" / "claims-policy.yaml"
"""The quota and defaults policy the claim tests admit under."""


def cluster_objects() -> list[Obj]:
    """The objects of tests/data/claims-cluster.yaml (12 devices claimed in ml-research)."""
    items: list[Obj] = yaml.safe_load(CLUSTER_FILE.read_text())["items"]
    return items


def exact(
    name: str = "gpu",
    device_class: str = GPU,
    count: int | None = 1,
    mode: str | None = "ExactCount",
    **extra: Any,
) -> Obj:
    """A v1 request with `exactly`."""
    body: Obj = {"deviceClassName": device_class, **extra}
    if mode is not None:
        body["allocationMode"] = mode
    if count is not None and mode != "All":
        body["count"] = count
    return {"name": name, "exactly": body}


def sub(name: str, device_class: str = GPU, count: int = 1, mode: str = "ExactCount") -> Obj:
    body: Obj = {"name": name, "deviceClassName": device_class, "allocationMode": mode}
    if mode != "All":
        body["count"] = count
    return body


def first(name: str, *alternatives: Obj) -> Obj:
    """A v1 request with `firstAvailable`."""
    return {"name": name, "firstAvailable": list(alternatives)}


def claim_spec(*requests: Obj, config: list[Obj] | None = None) -> Obj:
    devices: Obj = {"requests": list(requests)}
    if config is not None:
        devices["config"] = config
    return {"devices": devices}


def claim(name: str, *requests: Obj, namespace: str = "ml-research") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": claim_spec(*requests),
    }


def template(name: str, *requests: Obj, namespace: str = "ml-research") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": claim_spec(*requests)},
    }


def pod_spec(
    templates: tuple[str, ...] = (), claims: tuple[str, ...] = (), legacy: Obj | None = None
) -> Obj:
    container: Obj = {"name": "main", "image": "registry.example.com/cuda:12"}
    refs = [{"name": f"t{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    refs += [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    if refs:
        container["resources"] = {"claims": [{"name": r["name"]} for r in refs]}
    if legacy:
        container["resources"] = {"limits": legacy, "requests": legacy}
    spec: Obj = {"containers": [container]}
    if refs:
        spec["resourceClaims"] = refs
    return spec


_API = {
    "Pod": "v1",
    "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}


def workload(
    kind: str,
    name: str,
    count: int | None = 1,
    *,
    templates: tuple[str, ...] = (),
    claims: tuple[str, ...] = (),
    legacy: Obj | None = None,
    namespace: str = "ml-research",
) -> Obj:
    """A Pod or workload whose pods use `templates`; `count` is replicas or parallelism."""
    spec = pod_spec(templates, claims, legacy)
    meta = {"name": name, "namespace": namespace}
    obj: Obj = {"apiVersion": _API[kind], "kind": kind, "metadata": meta}
    pod_template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    if kind == "Pod":
        obj["spec"] = spec
    elif kind == "Job":
        obj["spec"] = {"template": pod_template}
        if count is not None:
            obj["spec"]["parallelism"] = count
    elif kind == "CronJob":
        job: Obj = {"template": pod_template}
        if count is not None:
            job["parallelism"] = count
        obj["spec"] = {"schedule": "0 * * * *", "jobTemplate": {"spec": job}}
    else:
        obj["spec"] = {"selector": {"matchLabels": {"app": name}}, "template": pod_template}
        if count is not None and kind != "DaemonSet":
            obj["spec"]["replicas"] = count
    return obj
