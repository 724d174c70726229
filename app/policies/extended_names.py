"""What a DeviceClass's `spec.extendedResourceName` (KEP-5004) collides with.

A class mapping a legacy name makes the scheduler serve every pod's plain request for it from
that class's devices, on nodes without a device plugin for it. Three collisions change which
devices pods get without anyone having asked:

- **another class maps the same name**: the scheduler uses the one created last (on a tie, the
  name sorted first), so a new class silently takes over every workload asking for the name;
- **the policy's translation sends the name elsewhere**: a `mappings` rule translates it to
  another class, so translated pods get one class and untranslated ones (other namespaces,
  exceptions, the scheduler's own path) the other;
- **the policy treats the name as a share** (a `sharing` rule: HAMi's `nvidia.com/gpumem`...):
  the scheduler's path serves whole devices, never a share.

`class_conflicts` says them for one class (`check`, on DeviceClass CREATE and UPDATE, warns);
`cluster_conflicts` for every class the view holds (`report`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any

from app.cluster.view import ClusterReader, Kind, newest_class
from app.policies.base import ALLOW, Context, Request, Result
from app.policies.builders import mapping_resolver, sharing_rules
from app.translation.legacy import MappingResolver
from app.translation.sharing import SharingRules

Obj = Mapping[str, Any]


def extended_name(device_class: Obj) -> str | None:
    spec = device_class.get("spec")
    value = spec.get("extendedResourceName") if isinstance(spec, Mapping) else None
    return value if isinstance(value, str) and value else None


def _name(device_class: Obj) -> str:
    meta = device_class.get("metadata")
    value = meta.get("name") if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else ""


def _stamped(device_class: Obj) -> dict[str, Any]:
    """The class with a creationTimestamp: on CREATE it has none yet, and gets this second's
    (a class created in the same second as another loses to the name sorted first)."""
    meta = device_class.get("metadata")
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    meta.setdefault("creationTimestamp", dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return {**device_class, "metadata": meta}


def class_conflicts(
    device_class: Obj,
    view: ClusterReader,
    mappings: MappingResolver,
    sharing: SharingRules,
) -> list[str]:
    """What `device_class`'s extendedResourceName collides with, one sentence each."""
    resource = extended_name(device_class)
    if resource is None:
        return []
    name = _name(device_class)
    found = []
    others = [
        c
        for c in view.objects(Kind.DEVICE_CLASS).values()
        if _name(c) != name and extended_name(c) == resource
    ]
    if others:
        used = newest_class([_stamped(device_class), *map(dict, others)])
        names = ", ".join(sorted(_name(c) for c in others))
        found.append(
            f"DeviceClass {names} already map{'s' if len(others) == 1 else ''} {resource}: the "
            f"scheduler serves it from the class created last, {_name(used)}; give each name "
            "to one class"
        )
    mapped = mappings.resolve(resource, view) if mappings.maps(resource) else None
    if mapped is not None and mapped.device_class_name != name:
        found.append(
            f"dra-webhook's mappings translate {resource} to DeviceClass "
            f"{mapped.device_class_name}: translated pods get it, pods the scheduler serves "
            f"get {name}; map the name to one class"
        )
    if resource in sharing.names:
        found.append(
            f"dra-webhook's sharing rules read {resource} as a share of a device: the "
            "scheduler's extended-resource path serves whole devices only"
        )
    return found


def cluster_conflicts(
    view: ClusterReader, mappings: MappingResolver, sharing: SharingRules
) -> Iterator[str]:
    """`class_conflicts` of every DeviceClass in the view, each pair of classes said once."""
    said: set[str] = set()
    for device_class in sorted(view.objects(Kind.DEVICE_CLASS).values(), key=_name):
        for line in class_conflicts(device_class, view, mappings, sharing):
            if line.startswith("DeviceClass "):
                resource = extended_name(device_class) or ""
                if resource in said:
                    continue
                said.add(resource)
            yield f"DeviceClass {_name(device_class)}: {line}"


def check(request: Request, ctx: Context) -> Result:
    """Validating, DeviceClass CREATE and UPDATE: warn of what its extendedResourceName collides
    with (never a denial: a class is the cluster administrator's to write, and a driver install
    must not fail on it)."""
    if not isinstance(request.object, dict):
        return ALLOW
    found = class_conflicts(
        request.object, ctx.view, ctx.parts[mapping_resolver], ctx.parts[sharing_rules]
    )
    return Result(warnings=tuple(f"spec.extendedResourceName: {line}" for line in found))


WARNING_LIMIT = 256
"""The API server cuts a longer admission warning short: each line above stays under it with
class and resource names of up to 40 characters (tests pin it; NVIDIA's are under 20)."""
