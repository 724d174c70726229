"""Checks the translation tests share: apply the patch, validate the pod, count its devices."""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import jsonpatch
import kubernetes_validate
import kubernetes_validate.utils

from app.k8s.objects import CONTAINER_FIELDS
from tests.specs import pod_spec

Obj = dict[str, Any]

# kubernetes_validate.validate re-reads its ~1 MB schema files on every call; reading each file
# once keeps the property tests fast. Validation itself is still the library's own code.
if not hasattr(kubernetes_validate.utils.schema_contents, "cache_info"):
    kubernetes_validate.utils.schema_contents = functools.cache(  # type: ignore[assignment]
        kubernetes_validate.utils.schema_contents
    )

KUBERNETES_VERSION = "1.34.0"
LEGACY = re.compile(r"^(nvidia\.com/gpu|nvidia\.com/mig-.*|amd\.com/gpu|gpu\.intel\.com/.*)$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DeviceKey = tuple[str, tuple[str, ...]]
"""(DeviceClass, CEL selectors): one kind of device."""


def apply(obj: Obj, patch: Iterable[Obj]) -> Obj:
    """The object after the webhook's JSONPatch, as the API server applies it."""
    result: Obj = jsonpatch.apply_patch(obj, list(patch))
    return result


def assert_valid(obj: Obj) -> None:
    """The Kubernetes 1.34 schema (strict: no unknown fields) plus the rules it cannot express."""
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    spec = pod_spec(obj["kind"], obj)
    assert spec is not None
    assert_pod_rules(spec.spec)


def assert_pod_rules(spec: Obj) -> None:
    entries = spec.get("resourceClaims") or []
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names)), f"pod-level claim names repeat: {names}"
    for entry in entries:
        assert DNS_LABEL.match(entry["name"]), f"claim name {entry['name']!r} is not a DNS label"
        refs = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if entry.get(k)]
        assert len(refs) == 1, f"{entry} must set exactly one of the two references"
        if entry.get("resourceClaimTemplateName"):
            assert DNS_LABEL.match(entry["resourceClaimTemplateName"])
    declared = set(names)
    for field, container in containers(spec):
        resources = container.get("resources") or {}
        used = [c["name"] for c in resources.get("claims") or []]
        assert len(used) == len(set(used)), f"{field} {container['name']} repeats a claim"
        missing = set(used) - declared
        assert not missing, f"{field} {container['name']} uses undeclared claims {missing}"
        for which in ("limits", "requests"):
            left = [n for n in resources.get(which) or {} if LEGACY.match(n)]
            assert not left, f"{field} {container['name']} still has {left} in {which}"


def containers(spec: Obj) -> Iterable[tuple[str, Obj]]:
    for field in CONTAINER_FIELDS:
        for container in spec.get(field) or []:
            yield field, container


def template_index(templates: Iterable[Obj]) -> dict[str, tuple[DeviceKey, int]]:
    """Template name -> ((class, selectors), count), for templates translation creates."""
    index: dict[str, tuple[DeviceKey, int]] = {}
    for template in templates:
        (request,) = template["spec"]["spec"]["devices"]["requests"]
        exactly = request["exactly"]
        selectors = tuple(s["cel"]["expression"] for s in exactly.get("selectors", ()))
        index[template["metadata"]["name"]] = (
            (exactly["deviceClassName"], selectors),
            exactly["count"],
        )
    return index


def devices_after(
    spec: Obj, templates: Mapping[str, tuple[DeviceKey, int]]
) -> dict[tuple[str, str], Counter[DeviceKey]]:
    """Per (container field, name): the devices its translated claims give it."""
    by_claim = {
        e["name"]: templates[e["resourceClaimTemplateName"]]
        for e in spec.get("resourceClaims") or []
        if e.get("resourceClaimTemplateName") in templates
    }
    found: dict[tuple[str, str], Counter[DeviceKey]] = {}
    for field, container in containers(spec):
        counter: Counter[DeviceKey] = Counter()
        for ref in (container.get("resources") or {}).get("claims") or []:
            if ref["name"] in by_claim:
                key, count = by_claim[ref["name"]]
                counter[key] += count
        found[field, container["name"]] = counter
    return found


def claim_users(spec: Obj) -> dict[str, set[tuple[str, str]]]:
    """Pod-level claim name -> the (field, container) pairs that reference it."""
    users: dict[str, set[tuple[str, str]]] = {}
    for field, container in containers(spec):
        for ref in (container.get("resources") or {}).get("claims") or []:
            users.setdefault(ref["name"], set()).add((field, container["name"]))
    return users
