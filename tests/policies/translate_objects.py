"""Objects and decisions the translation tests build: pods, workloads, templates and claims in
the translate namespace, and the pipeline's answer to them (shared by the translation test
modules, which import no test module)."""

from __future__ import annotations

from typing import Any

import orjson

from app.config.policy import Policy
from app.pipeline import Decision, Endpoint
from app.transport.review import decode_review
from tests.helpers import DEMO_NAMESPACES, clone, make_pipeline, policy_from, wrap
from tests.policies.translate_support import apply, assert_valid

Obj = dict[str, Any]

GPU = "nvidia.com/gpu"
NS = "ml-research"
GPU_CLASS = ("gpu.nvidia.com", ())


def container(
    name: str,
    limits: Obj | None = None,
    requests: Obj | None = None,
    **extra: Any,
) -> Obj:
    """A container as the API server sends it: extended-resource limits copied into requests."""
    resources: Obj = {}
    if limits is not None:
        resources["limits"] = dict(limits)
        resources["requests"] = {**limits, **(requests or {})}
    elif requests is not None:
        resources["requests"] = dict(requests)
    return {"name": name, "image": "cuda:12", "resources": resources, **extra}


def gpus(name: str, count: int | str, **extra: Any) -> Obj:
    return container(name, limits={GPU: str(count)}, **extra)


def sidecar(name: str, count: int | str) -> Obj:
    return gpus(name, count, restartPolicy="Always")


def pod(*containers: Obj, init: tuple[Obj, ...] = (), ns: str = NS, **spec: Any) -> Obj:
    body: Obj = {"containers": list(containers) or [container("app")], **spec}
    if init:
        body["initContainers"] = list(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns},
        "spec": body,
    }


def deployment(*containers: Obj, ns: str = NS) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": list(containers)},
            },
        },
    }


def decide(
    body: Obj,
    endpoint: Endpoint = Endpoint.MUTATE,
    objects: list[Obj] | None = None,
    policy: Policy | None = None,
) -> Decision:
    pipeline = make_pipeline(objects, policy)
    return pipeline.review(endpoint, decode_review(orjson.dumps(body)))


def translate(
    obj: Obj, objects: list[Obj] | None = None, policy: Policy | None = None, **wrap_args: Any
) -> tuple[Decision, Obj]:
    """Mutate `obj`; the decision must allow it; returns the patched, validated object."""
    decision = decide(wrap(obj, **wrap_args), objects=objects, policy=policy)
    assert decision.allowed, decision.message
    result = apply(obj, decision.patch)
    assert_valid(result)
    return decision, result


def rct(name: str, device_class: str, ns: str = NS, **request: Any) -> Obj:
    exactly = {"deviceClassName": device_class, "count": 1, **request}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}}},
    }


def claim(name: str, spec_requests: list[Obj], ns: str = NS) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": spec_requests}},
    }


def device_class(name: str, extended_resource: str | None = None) -> Obj:
    spec = {"extendedResourceName": extended_resource} if extended_resource else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def entry_for(result: Obj, claim_name: str) -> Obj:
    (entry,) = [e for e in result["spec"]["resourceClaims"] if e["name"] == claim_name]
    return entry


def claim_refs(container: Obj) -> list[str]:
    return [c["name"] for c in container["resources"].get("claims", [])]


# -- the captured fixture ------------------------------------------------------------------


def reapplied_manifest(templates_in_view: bool) -> tuple[Obj, Obj, Decision]:
    """A translated Deployment, `kubectl apply`-ed (client-side) again: the legacy GPU is back."""
    policy = policy_from("translation: {translateWorkloads: true}")
    manifest = deployment(gpus("cuda", 2), gpus("side", 1))
    created, translated = translate(manifest, policy=policy)
    objects = [*DEMO_NAMESPACES, *(created.templates if templates_in_view else ())]
    reapplied = clone(translated)
    for c in reapplied["spec"]["template"]["spec"]["containers"]:
        count = "2" if c["name"] == "cuda" else "1"
        c["resources"]["limits"] = {GPU: count}
    decision = decide(
        wrap(reapplied, operation="UPDATE", old=translated), objects=objects, policy=policy
    )
    return reapplied, translated, decision
