"""What a pod already asks for through DRA, as translation reads it: the entries an earlier
translation added (replaced on reinvocation, never the user's own), the DeviceClasses its
claims and templates name, and the claim names it already uses."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from app.cluster.view import ClusterReader, Kind
from app.errors import ObjectShapeError
from app.k8s.objects import PodSpecRef, list_field
from app.k8s.templates import MANAGED_BY, MANAGED_BY_LABEL
from app.translation.wants import Problem


def own_entries(
    spec: PodSpecRef, namespace: str, is_own_name: Callable[[str], bool], view: ClusterReader
) -> tuple[list[Problem], dict[int, str]]:
    """Pod-level entries an earlier translation added (index -> name), and the problems of
    entries that look like ours but cannot be told apart.

    An entry is ours only when the view holds its template and the template carries our
    managed-by label: anything else is the user's and is never removed. An entry whose template
    is named like ours but is not in the view cannot be told apart: a problem, rather than
    removing what may be the user's or doubling the devices by translating next to it.
    """
    problems: list[Problem] = []
    stale: dict[int, str] = {}
    for index, entry in enumerate(list_field(spec.spec, "resourceClaims", spec.path)):
        if not isinstance(entry, dict):
            continue
        name, template = entry.get("name"), entry.get("resourceClaimTemplateName")
        if not isinstance(name, str) or not isinstance(template, str):
            continue
        obj = view.get(Kind.RESOURCE_CLAIM_TEMPLATE, template, namespace)
        if obj is None:
            if is_own_name(template):
                problems.append(_unknown_own(spec, index, name, template))
            continue
        labels = obj.get("metadata", {}).get("labels")
        if isinstance(labels, dict) and labels.get(MANAGED_BY_LABEL) == MANAGED_BY:
            stale[index] = name
    return problems, stale


def _unknown_own(spec: PodSpecRef, index: int, name: str, template: str) -> Problem:
    return Problem(
        ("resourceClaims", name, template),
        f"{spec.path}.resourceClaims[{index}]",
        f"{name}: ResourceClaimTemplate {template} is named like the ones dra-webhook "
        "creates, but is not in its cluster view (not synced yet, or deleted), so this entry "
        "cannot be told apart from one of your own; retry once the template exists, or "
        "rename the entry's template",
    )


def dra_classes(
    spec: PodSpecRef, namespace: str, view: ClusterReader, skip: Mapping[int, str]
) -> tuple[dict[str, str], list[str]]:
    """DeviceClasses the pod already asks for through DRA (class -> which entry), and the
    entries whose ResourceClaim or ResourceClaimTemplate the view does not hold."""
    in_use: dict[str, str] = {}
    unknown: list[str] = []
    for index, entry in enumerate(list_field(spec.spec, "resourceClaims", spec.path)):
        where = f"{spec.path}.resourceClaims[{index}]"
        if not isinstance(entry, dict):
            raise ObjectShapeError(where, "must be an object")
        if index in skip:
            continue
        claim_name = entry.get("resourceClaimName")
        template_name = entry.get("resourceClaimTemplateName")
        claim_spec: Any = None
        if isinstance(claim_name, str) and claim_name:
            described = f"{where} {entry.get('name')}: ResourceClaim {claim_name}"
            obj = view.get(Kind.RESOURCE_CLAIM, claim_name, namespace)
            if obj is not None:
                claim_spec = obj.get("spec")
        elif isinstance(template_name, str) and template_name:
            described = f"{where} {entry.get('name')}: ResourceClaimTemplate {template_name}"
            obj = view.get(Kind.RESOURCE_CLAIM_TEMPLATE, template_name, namespace)
            if obj is not None:
                outer = obj.get("spec")
                claim_spec = outer.get("spec") if isinstance(outer, dict) else None
        else:
            continue  # neither is set: the API server rejects the pod
        if obj is None:
            unknown.append(described)
            continue
        for device_class in _classes_of(claim_spec):
            in_use.setdefault(device_class, described)
    return in_use, unknown


def _classes_of(claim_spec: Any) -> Iterable[str]:
    """Every deviceClassName a ResourceClaimSpec names (exactly and firstAvailable)."""
    devices = claim_spec.get("devices") if isinstance(claim_spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    for item in requests if isinstance(requests, list) else ():
        if not isinstance(item, dict):
            continue
        exactly = item.get("exactly")
        if isinstance(exactly, dict) and isinstance(exactly.get("deviceClassName"), str):
            yield exactly["deviceClassName"]
        for sub in item.get("firstAvailable") or ():
            if isinstance(sub, dict) and isinstance(sub.get("deviceClassName"), str):
                yield sub["deviceClassName"]


def existing_claim_names(spec: PodSpecRef) -> set[str]:
    names: set[str] = set()
    for index, entry in enumerate(list_field(spec.spec, "resourceClaims", spec.path)):
        if not isinstance(entry, dict):
            raise ObjectShapeError(f"{spec.path}.resourceClaims[{index}]", "must be an object")
        name = entry.get("name")
        if isinstance(name, str):
            names.add(name)
    return names
