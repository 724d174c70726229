"""DRA objects written for resource.k8s.io before v1, brought to v1 as the API server converts them.

Kubernetes serves resource.k8s.io/v1 by default since 1.34, and no release serves v1beta1 or
v1beta2 without `--runtime-config` (managed clusters such as GKE turned them on for DRA's beta):
a manifest written for them meets `no matches for kind "ResourceClaimTemplate" in version
"resource.k8s.io/v1beta1"` on a default 1.36 cluster. The request shape changed on the way, so a
version bump alone is wrong. The API server converts every version through its internal type
(kubernetes/kubernetes pkg/apis/resource/v1beta1/conversion.go by hand, the rest generated in
zz_generated.conversion.go; v1beta2 has generated, field-for-field conversions only); `plan`
makes the same changes to a manifest, field by field:

- v1beta1 and v1beta2 ResourceClaim, ResourceClaimTemplate, DeviceClass, ResourceSlice:
  `apiVersion` becomes `resource.k8s.io/v1`; v1beta2 is the v1 shape already.
- v1beta1 requests (`devices.requests[]`): `deviceClassName`, `selectors`, `allocationMode`,
  `count`, `adminAccess`, `tolerations` and `capacity` move under `exactly`, in their order,
  when any is set (`Convert_v1beta1_DeviceRequest_To_resource_DeviceRequest`,
  `hasAnyMainRequestFieldsSet`); when none is (`count: 0`, `deviceClassName: ""`, null) they
  are left out. `firstAvailable` subrequests are the same in v1 and stay.
- v1beta1 ResourceSlice devices: the fields of `basic` move onto the device
  (`Convert_v1beta1_Device_To_resource_Device`); `spec.nodeName: ""` and `spec.allNodes:
  false` are left out (pointers in v1: `Convert_v1beta1_ResourceSliceSpec_To_resource_...`).
- Everything else (constraints, config, status, a DeviceClass's spec, counters, capacities) is
  the same field in v1 and stays as written.
- A pod's `resourceClaims[].source.resourceClaimName` / `.resourceClaimTemplateName` (core/v1
  before Kubernetes 1.31, written next to v1alpha2 claims) move onto the entry itself.

A request that the API server rejects in every version (`firstAvailable` with `deviceClassName`,
or already an `exactly` under v1beta1) and a field of the wrong type are problems with their field
path, and the object is left as it is. What has no faithful conversion (classic DRA's
v1alpha1/v1alpha2 ResourceClass, claim parameters and PodSchedulingContext; the alpha v1alpha3
kinds; ResourceSlices of those versions) is a problem naming what to write instead
(`app.migrate.advice`), never dropped.

The change is a list of `Edit`s (:mod:`app.migrate.version_edits`), made on the plain object or
on the round-trip YAML tree, so a comment on `deviceClassName` stays on it under `exactly`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.errors import ObjectShapeError
from app.migrate import advice
from app.migrate.version_edits import Drop, Edit, Lift, Obj, SetValue, Where, Wrap, walk
from app.workloads import Catalogue, group_kind
from app.workloads.paths import dotted

GROUP = "resource.k8s.io"
TARGET = f"{GROUP}/v1"
CONVERTED = frozenset({"ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice"})
"""The kinds v1beta1 and v1beta2 share with v1 (DeviceTaintRule has no v1 form yet)."""
BETAS = ("v1beta1", "v1beta2")
MAIN_FIELDS = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
)
"""A v1beta1 request's own fields, which v1 keeps under `exactly`."""
_TYPES: dict[str, tuple[type, ...]] = {
    "deviceClassName": (str,),
    "allocationMode": (str,),
    "count": (int,),
    "adminAccess": (bool,),
    "selectors": (list,),
    "tolerations": (list,),
    "capacity": (dict,),
}
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list"}
_DEVICE_KEYS = frozenset({"name", "basic"})
"""The fields of a v1beta1 ResourceSlice device: all else is under `basic`."""


@dataclass(slots=True)
class Upgrade:
    """What an object needs to be read as resource.k8s.io/v1, or why it cannot be."""

    edits: list[Edit] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    """(field path, message): the object is left as it is."""

    @property
    def needed(self) -> bool:
        return bool(self.edits or self.problems)


def plan(obj: Any, catalogue: Catalogue | None = None) -> Upgrade:
    """The edits that bring `obj` to resource.k8s.io/v1 (and its pod specs' claims to core/v1's
    current shape), or the problems that stop it; never raises on a malformed object."""
    found = Upgrade()
    if not isinstance(obj, dict):
        return found
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if isinstance(api_version, str) and isinstance(kind, str):
        group, _, version = api_version.rpartition("/")
        if group == GROUP:
            _resource(obj, version, kind, found)
    if catalogue is not None:
        _pod_claims(obj, catalogue, found)
    if found.problems:
        found.edits = []
    return found


def is_old(obj: Any) -> bool:
    """Whether `obj` is a resource.k8s.io object of a version before v1."""
    if not isinstance(obj, dict):
        return False
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str):
        return False
    group, _, version = api_version.rpartition("/")
    return group == GROUP and version != "v1"


# -- what each kind needs --------------------------------------------------------------------


def _resource(obj: Obj, version: str, kind: str, found: Upgrade) -> None:
    if version == "v1":
        return
    if version in BETAS:
        if kind not in CONVERTED:
            return
        found.edits.append(SetValue((), "apiVersion", TARGET))
        if version == "v1beta1":
            try:
                _v1beta1(obj, kind, found)
            except ObjectShapeError as exc:
                found.problems.append((exc.path, exc.message))
        return
    problem = advice.unconvertible(obj, version, kind)
    if problem is not None:
        found.problems.append(problem)


def _v1beta1(obj: Obj, kind: str, found: Upgrade) -> None:
    if kind == "ResourceClaim":
        _claim_spec(obj, ("spec",), found)
    elif kind == "ResourceClaimTemplate":
        spec = _map(obj, ("spec",))
        if spec is not None:
            _claim_spec(obj, ("spec", "spec"), found)
    elif kind == "ResourceSlice":
        _slice_spec(obj, found)


def _claim_spec(obj: Obj, at: Where, found: Upgrade) -> None:
    spec = _map(obj, at)
    if spec is None or _map(obj, (*at, "devices")) is None:
        return
    requests = _list(obj, (*at, "devices", "requests"))
    for index, request in enumerate(requests or ()):
        where = (*at, "devices", "requests", index)
        if not isinstance(request, dict):
            raise ObjectShapeError(dotted(where), "must be an object")
        _request(request, where, found)


def _request(request: Obj, where: Where, found: Upgrade) -> None:
    """`Convert_v1beta1_DeviceRequest_To_resource_DeviceRequest`: the request's own fields go
    under `exactly` when any of them is set (`hasAnyMainRequestFieldsSet`)."""
    if "exactly" in request:
        raise ObjectShapeError(
            dotted((*where, "exactly")),
            "is not a field of resource.k8s.io/v1beta1 (the request is already in the v1 shape): "
            f"set `apiVersion: {TARGET}` on the object, or write the request's fields without "
            "`exactly`",
        )
    present = [key for key in request if key in MAIN_FIELDS]
    for key in present:
        _typed(request[key], key, (*where, key))
    first = request.get("firstAvailable")
    if first is not None and not isinstance(first, list):
        raise ObjectShapeError(dotted((*where, "firstAvailable")), "must be a list")
    set_ = [key for key in present if _is_set(key, request[key])]
    if set_ and first:
        raise ObjectShapeError(
            dotted(where),
            f"has both firstAvailable and {', '.join(set_)}: a request is either one exact "
            "request or a list of alternatives, and the API server rejects both in every version "
            "(move the fields into the firstAvailable entries, or drop firstAvailable)",
        )
    if set_:
        found.edits.append(Wrap(where, tuple(present), "exactly"))
    else:
        found.edits += [Drop(where, key) for key in present]


def _is_set(key: str, value: Any) -> bool:
    """Whether Go's decoder leaves the field at something other than its zero value."""
    if value is None:
        return False
    if key in ("deviceClassName", "allocationMode"):
        return bool(value != "")
    if key == "count":
        return bool(value != 0)
    return True


def _typed(value: Any, key: str, where: Where) -> None:
    if value is None:
        return
    kinds = _TYPES[key]
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise ObjectShapeError(dotted(where), f"must be {_TYPE_NAMES.get(kinds[0], 'an object')}")


def _slice_spec(obj: Obj, found: Upgrade) -> None:
    """`Convert_v1beta1_ResourceSliceSpec_To_resource_ResourceSliceSpec` and
    `Convert_v1beta1_Device_To_resource_Device`."""
    spec = _map(obj, ("spec",))
    if spec is None:
        return
    for key, zero, kind in (("nodeName", "", str), ("allNodes", False, bool)):
        if key not in spec:
            continue
        value = spec[key]
        if value is not None and not isinstance(value, kind):
            raise ObjectShapeError(f"spec.{key}", f"must be {_TYPE_NAMES[kind]}")
        if value is None or value == zero:
            found.edits.append(Drop(("spec",), key))
    devices = _list(obj, ("spec", "devices"))
    for index, device in enumerate(devices or ()):
        where: Where = ("spec", "devices", index)
        if not isinstance(device, dict):
            raise ObjectShapeError(dotted(where), "must be an object")
        other = sorted(str(k) for k in device if k not in _DEVICE_KEYS)
        if other:
            raise ObjectShapeError(
                dotted((*where, other[0])),
                "is not a field of a resource.k8s.io/v1beta1 device (its fields are under `basic`)",
            )
        if "basic" not in device:
            continue
        basic = device["basic"]
        if basic is None:
            found.edits.append(Drop(where, "basic"))
        elif not isinstance(basic, dict):
            raise ObjectShapeError(dotted((*where, "basic")), "must be an object")
        else:
            if "name" in basic:
                raise ObjectShapeError(
                    dotted((*where, "basic", "name")),
                    "is not a field of a resource.k8s.io/v1beta1 basic device",
                )
            found.edits.append(Lift(where, "basic"))


def _pod_claims(obj: Obj, catalogue: Catalogue, found: Upgrade) -> None:
    """A pod's `resourceClaims[].source` (core/v1 before Kubernetes 1.31, written with classic
    DRA's v1alpha2 claims): its two names now sit on the entry itself. Unknown to 1.31 and
    later, it leaves the entry naming neither, which the API server rejects."""
    group, kind = group_kind(obj)
    try:
        templates = catalogue.templates(group, kind, obj)
    except ObjectShapeError:
        return  # translation reports it
    for template in templates:
        claims = template.spec.spec.get("resourceClaims")
        if not isinstance(claims, list):
            continue
        for index, entry in enumerate(claims):
            if not isinstance(entry, dict) or "source" not in entry:
                continue
            where: Where = (*template.parts, "resourceClaims", index)
            source = entry["source"]
            if source is None:
                found.edits.append(Drop(where, "source"))
                continue
            if not isinstance(source, dict):
                found.problems.append((dotted((*where, "source")), "must be an object"))
                continue
            both = sorted(str(k) for k in source if k in entry)
            if both:
                found.problems.append(
                    (
                        dotted((*where, "source", both[0])),
                        f"is also set on the entry itself: keep one {both[0]}",
                    )
                )
                continue
            found.edits.append(Lift(where, "source"))


def _map(obj: Obj, at: Where) -> Obj | None:
    node = walk(obj, at)
    if node is None:
        return None
    if not isinstance(node, dict):
        raise ObjectShapeError(dotted(at), "must be an object")
    return node


def _list(obj: Obj, at: Where) -> list[Any] | None:
    node = walk(obj, at)
    if node is None:
        return None
    if not isinstance(node, list):
        raise ObjectShapeError(dotted(at), "must be a list")
    return node
