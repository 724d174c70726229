"""A translation plan as JSONPatch ops over the pod spec it was made from.

The order is the one the API server needs to apply it in: an earlier translation's entries
removed (highest index first), then per container (in pod order) the legacy names out of
`limits` and `requests` and the claim references in, then the pod-level entries. An emptied
`limits` or `requests` map is removed whole, as the API server would drop it anyway.
"""

from __future__ import annotations

from typing import Any

from app.errors import ObjectShapeError
from app.k8s import patch as jsonpatch
from app.k8s.objects import containers, list_field
from app.k8s.patch import PatchOp
from app.translation.plan import TranslationPlan

Obj = dict[str, Any]


def to_patch(plan: TranslationPlan) -> list[PatchOp]:
    """The ops that turn the plan's pod spec into the translated one (a plan with no cap
    reached and no problems; the callers deny the others)."""
    ops = _unpatch(plan) if plan.stale else []
    for pointer, (ref, names) in plan.removed().items():
        resources = ref.container["resources"]  # read and checked by legacy_requests
        for which in ("limits", "requests"):
            values = resources.get(which) or {}
            gone = [n for n in values if n in names]
            if not gone:
                continue
            base = f"{pointer}/resources/{which}"
            if len(gone) == len(values):
                ops.append(jsonpatch.remove(base))  # an emptied map disappears
            else:
                ops += [jsonpatch.remove(base + jsonpatch.pointer(n)) for n in gone]
        claims = plan.claims_of.get(pointer)
        if claims:
            ops += _add_items(ref.container, "resources", f"{ref.path}.resources", pointer, claims)
    entries: list[Obj] = [
        {"name": c.name, "resourceClaimTemplateName": c.template.name}
        for c in plan.claims
        if c.template is not None
    ]
    if entries:
        spec = plan.spec
        ops += _add_list(spec.spec, "resourceClaims", spec.path, spec.pointer, entries)
    return ops


def _unpatch(plan: TranslationPlan) -> list[PatchOp]:
    """Remove an earlier translation's entries and references (highest index first)."""
    spec = plan.spec
    ops = [
        jsonpatch.remove(f"{spec.pointer}/resourceClaims/{index}")
        for index in sorted(plan.stale, reverse=True)
    ]
    names = set(plan.stale.values())
    for ref in containers(spec):
        resources = ref.container.get("resources")
        refs = resources.get("claims") if isinstance(resources, dict) else None
        if not isinstance(refs, list):
            continue
        ops += [
            jsonpatch.remove(f"{ref.pointer}/resources/claims/{index}")
            for index in reversed(range(len(refs)))
            if isinstance(refs[index], dict) and refs[index].get("name") in names
        ]
    return ops


def _add_items(
    container: Obj, key: str, path: str, pointer: str, claims: list[str]
) -> list[PatchOp]:
    """Add `resources.claims` references, creating `resources` when the container has none."""
    refs: list[Obj] = [{"name": name} for name in claims]
    resources = container.get(key)
    if resources is None:
        return [jsonpatch.add(f"{pointer}/{key}", {"claims": refs})]
    if not isinstance(resources, dict):
        raise ObjectShapeError(path, "must be an object")
    return _add_list(resources, "claims", path, f"{pointer}/{key}", refs)


def _add_list(parent: Obj, key: str, path: str, pointer: str, items: list[Obj]) -> list[PatchOp]:
    existing = list_field(parent, key, path)
    if not existing and key not in parent:
        return [jsonpatch.add(f"{pointer}/{key}", items)]
    if not existing:
        return [jsonpatch.replace(f"{pointer}/{key}", items)]
    return [jsonpatch.add(f"{pointer}/{key}/-", item) for item in items]
