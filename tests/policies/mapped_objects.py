"""Builders for the tests of mapped names (app/policies/mapped.py): a DeviceClass that maps
`nvidia.com/gpu` (spec.extendedResourceName, KEP-5004), two 8-GPU nodes, pods and workloads
asking for the name, and one review through a pipeline."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from app.config import Policy
from app.pipeline import Decision, Endpoint, Pipeline
from app.transport.review import decode_review
from tests.allocation.nvidia import CLASSES, allocated_claim, node_slice
from tests.helpers import DEMO_NAMESPACES, make_pipeline, namespace, wrap

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
CLASS = "gpu.nvidia.com"
IMPLICIT = f"deviceclass.resource.kubernetes.io/{CLASS}"


def mapping_class(name: str = CLASS, resource: str = GPU) -> Obj:
    """The NVIDIA driver's whole-GPU class, mapping `resource` as its chart can."""
    found = copy.deepcopy(CLASSES[0])
    found["metadata"]["name"] = name
    found["spec"]["extendedResourceName"] = resource
    return found


FLEET = [node_slice("node-a", 8), node_slice("node-b", 8)]
"""16 GPUs, at most 8 on one node."""
QUOTA_NS = namespace("ml-quota", "audit", team="quota")


def cluster(*extra: Obj, mapped: bool = True) -> list[Obj]:
    classes = [mapping_class(), CLASSES[1]] if mapped else list(CLASSES)
    return [*DEMO_NAMESPACES, QUOTA_NS, *classes, *FLEET, *extra]


def container(name: str, amount: int | str, resource: str = GPU, *, limits: bool = True) -> Obj:
    asked = {resource: str(amount)}
    resources = {"limits": asked, "requests": dict(asked)} if limits else {"requests": asked}
    return {"name": name, "image": "cuda", "resources": resources}


def pod(ns: str, *containers: Obj, init: tuple[Obj, ...] = (), **spec: Any) -> Obj:
    body: Obj = {"containers": list(containers) or [container("cuda", 1)], **spec}
    if init:
        body["initContainers"] = list(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": ns, "labels": {"app": "trainer"}},
        "spec": body,
    }


def deployment(ns: str, replicas: int, *containers: Obj, name: str = "trainer") -> Obj:
    """A Deployment whose pod template asks for what `containers` do (limits only: a template
    is not defaulted)."""
    spec = {"containers": [_limits_only(c) for c in containers]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def _limits_only(c: Obj) -> Obj:
    out = copy.deepcopy(c)
    resources = out["resources"]
    resources.pop("requests", None) if "limits" in resources else None
    return out


def held(name: str, ns: str, node: str, count: int) -> Obj:
    """A claim of `count` whole GPUs allocated on `node` (devices gpu-0...)."""
    found = allocated_claim(name, *[(node, f"gpu-{i}") for i in range(count)])
    found["metadata"]["namespace"] = ns
    request = {"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": count}}
    found["spec"] = {"devices": {"requests": [request]}}
    return found


def pipeline(*extra: Obj, policy: Policy | None = None, mapped: bool = True) -> Pipeline:
    return make_pipeline(cluster(*extra, mapped=mapped), policy)


def review(
    where: Pipeline,
    obj: Obj,
    *,
    operation: str = "CREATE",
    old: Obj | None = None,
    endpoint: Endpoint = Endpoint.VALIDATE,
) -> Decision:
    body = wrap(obj, operation=operation, old=old)
    return where.review(endpoint, decode_review(orjson.dumps(body)))
