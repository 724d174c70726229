"""A translation plan written straight into a copy of the object it was made from.

What `to_patch` says as JSONPatch ops, said as the finished object: for callers that hold a
manifest rather than answer an API server (`migrate`, app/migrate, brings YAML to it). The two are
kept equal by a property test (tests/translation/test_manifest.py).
"""

from __future__ import annotations

import copy
from typing import Any

from app.k8s.patch import resolve
from app.translation.plan import TranslationPlan

Obj = dict[str, Any]


def write(obj: Obj, plan: TranslationPlan) -> Obj:
    """A deep copy of `obj` with the plan applied; `obj` is left alone."""
    result = copy.deepcopy(obj)
    spec = resolve(result, plan.spec.pointer)
    if plan.stale:
        names = set(plan.stale.values())
        entries = spec["resourceClaims"]
        spec["resourceClaims"] = [e for i, e in enumerate(entries) if i not in plan.stale]
        for field in ("initContainers", "containers", "ephemeralContainers"):
            for container in spec.get(field) or []:
                resources = container.get("resources")
                refs = resources.get("claims") if isinstance(resources, dict) else None
                if isinstance(refs, list):
                    resources["claims"] = [
                        r for r in refs if not (isinstance(r, dict) and r.get("name") in names)
                    ]
    for pointer, (ref, gone) in plan.removed().items():
        container = spec[ref.field][ref.index]
        resources = container.setdefault("resources", {})
        for which in ("limits", "requests"):
            values = resources.get(which)
            if not values:
                continue
            left = {k: v for k, v in values.items() if k not in gone}
            if left:
                resources[which] = left
            else:
                del resources[which]
        claims = plan.claims_of.get(pointer)
        if claims:
            resources["claims"] = (resources.get("claims") or []) + [{"name": c} for c in claims]
    entries = [
        {"name": c.name, "resourceClaimTemplateName": c.template.name}
        for c in plan.claims
        if c.template is not None
    ]
    if entries:
        spec["resourceClaims"] = (spec.get("resourceClaims") or []) + entries
    return result
