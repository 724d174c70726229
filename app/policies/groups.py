"""Group claims as the checks see them: a Workload's or PodGroup's claims, and which of a pod's
claims are its group's (`app.k8s.groups` reads the fields).

A group claim is judged like a pod's claim, once for the group: the DeviceClass allow-list
(`device_classes`), quota (`quota.groups`: one claim per group, not one per pod) and
satisfiability (`satisfiability.check_group`). A pod's `resourceClaims` entry equal to one of
its PodGroup's (the PodGroup in the cluster view, `Kind.POD_GROUP`) is the group's claim: the
resource claim controller makes no claim for the pod, so quota does not charge the pod for it
and the pod's joint satisfiability leaves it out. Where the view holds no such PodGroup (not
served, not granted, not seen yet) the entry is the pod's own, as before group claims: an
overcount, never an undercount.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.cluster.view import ClusterReader, Kind
from app.k8s.claims import ClaimSpec, stored_claim_spec
from app.k8s.groups import GROUP_KINDS, ClaimKey, GroupClaim, group_claims, pod_group_name
from app.k8s.groups import stored_group_keys as _stored_keys
from app.policies.base import Request

__all__ = ["GroupClaim", "claims_of", "is_group", "named_kind", "named_spec", "shared_keys"]


def is_group(request: Request) -> bool:
    """Whether the request is of a kind that carries group claims."""
    return (request.group, request.kind) in GROUP_KINDS


def claims_of(request: Request) -> list[GroupClaim]:
    """The object's group claims. Raises ObjectShapeError with the field path."""
    if request.object is None or not is_group(request):
        return []
    return group_claims(request.object, request.kind)


def named_kind(claim: GroupClaim) -> Kind:
    return Kind.RESOURCE_CLAIM if claim.claim_name is not None else Kind.RESOURCE_CLAIM_TEMPLATE


def named_spec(
    claim: GroupClaim, namespace: str, view: ClusterReader
) -> tuple[Mapping[str, Any], ClaimSpec] | None:
    """The stored claim or template a group claim names and its claim spec; None when the view
    does not hold it (yet: its own admission judged it) or it cannot be read."""
    kind = named_kind(claim)
    name = claim.claim_name if claim.claim_name is not None else claim.template_name
    obj = view.get(kind, name or "", namespace)
    if obj is None:
        return None
    parsed = stored_claim_spec(obj, kind is Kind.RESOURCE_CLAIM_TEMPLATE)
    return None if parsed is None else (obj, parsed)


def shared_keys(
    pod_spec: Mapping[str, Any], namespace: str, view: ClusterReader
) -> frozenset[ClaimKey]:
    """The keys of the group claims a pod spec's PodGroup shares (none without a PodGroup the
    view holds)."""
    name = pod_group_name(pod_spec)
    if name is None:
        return frozenset()
    group = view.get(Kind.POD_GROUP, name, namespace)
    return _stored_keys(group) if group is not None else frozenset()
