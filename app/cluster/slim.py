"""What the cluster view keeps of each object: only the fields some policy reads.

A ResourceClaim as the API server sends it carries managedFields, annotations and per-device
status; none of that is read by a policy, and on a large cluster it is most of the memory. Kept,
per kind:

| kind | kept besides the common metadata |
| --- | --- |
| Namespace | nothing (the mode label is in `metadata.labels`) |
| DeviceClass | `spec`, `metadata.creationTimestamp` (the newer of two mapping one name wins) |
| ResourceSlice, ResourceClaimTemplate | `spec` |
| ResourceClaim | `spec`; `status.allocation.devices.results[]`, `status.reservedFor[]` (below) |
| ResourceQuota | `spec`, `status.used` |
| Node | nothing but its name, labels, uid and resourceVersion (watched as metadata only) |
| PriorityClass | `value`, `globalDefault`, `preemptionPolicy` |
| Pod | name, namespace, uid, resourceVersion, deletionTimestamp; in `spec`: see below |
| PodGroup | `spec.resourceClaims`, `status.resourceClaimStatuses` (its group claims) |

A Pod keeps `spec.priority`, `priorityClassName`, `preemptionPolicy` and the names of its
`resourceClaims`, and is held only when it references resource claims
(`app.cluster.view.held`): the view answers "who holds this claim, at what priority"
(`status.reservedFor` names the pod), and a cluster's other pods, most of them, cost nothing
but their watch events. What is kept of one is
a few hundred bytes: labels, annotations, containers and status are all dropped.

An allocation result keeps {request, driver, pool, device, adminAccess, shareID,
consumedCapacity, tolerations}, the ones set (not null). A consumer in `status.reservedFor` (a
pod, or a Workload/PodGroup for a group claim; up to 256) keeps {resource, name, uid}: who would
lose the claim's devices (a DeviceTaintRule's blast radius, the holders a preemptor cannot evict).

Common metadata: name, namespace, labels, uid, resourceVersion, generation, deletionTimestamp.
ResourceSlice `spec` is kept whole: the allocation model reads its node selection, pools, shared
counters and each device's taints, counter consumption, capacities with their request policies
and `allowMultipleAllocations`.
`spec` is shared with the decoded object, not copied: slimming costs two small dicts per object.
Slimming a slimmed object gives an equal object, so sources may slim early (per list page, to
bound peak memory) and the view slims again on `apply`/`replace`.

ResourceSlice devices are most of a large cluster's view, and most of a device is its attribute
values: one small dict each (`{"string": "Hopper"}`, 184 bytes), equal across every GPU of a
model. With a `SharedValues` table the view keeps one dict per distinct value instead (measured
in docs/benchmarks.md, "Cluster view memory"). The view's objects are read-only for everyone:
shared values make that a hard rule.

The functions take the kind as its string value so that `app.cluster.view` can import this module.
"""

from __future__ import annotations

import sys
from typing import Any

Obj = dict[str, Any]

KEPT_METADATA = (
    "name",
    "namespace",
    "labels",
    "uid",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
)
_KEEPS_SPEC = frozenset(
    {"DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "ResourceQuota"}
)
_ALLOCATION_RESULT_FIELDS = (
    "request",
    "driver",
    "pool",
    "device",
    "adminAccess",
    "shareID",
    "consumedCapacity",
    "tolerations",
)
"""What the allocation model reads of a result: which device is taken, and whether wholly (no
`shareID`), as a share (`consumedCapacity`), or not at all (`adminAccess`); and the tolerations
the claim was allocated with, which decide whether a NoExecute device taint evicts its pods."""
_SCALARS = (str, int, bool)
_NODE_METADATA = ("name", "labels", "uid", "resourceVersion")
"""A Node is read for its labels (which slices' nodeSelectors reach it); uid and
resourceVersion let a relist keep an unchanged one."""
_POD_METADATA = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")
_POD_SPEC = ("priority", "priorityClassName", "preemptionPolicy")
_PRIORITY_CLASS_FIELDS = ("value", "globalDefault", "preemptionPolicy")


class SharedValues:
    """One dict object per distinct scalar attribute or capacity value of ResourceSlice devices.

    Bounded: past `limit` distinct values new ones are kept as they come (unshared), so a
    cluster whose devices all carry unique values (serial numbers) costs at most `limit` slots.
    """

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit
        self._values: dict[tuple[str, object], Any] = {}

    def __len__(self) -> int:
        return len(self._values)

    def values(self, values: Obj) -> Obj:
        """`values` (a device's attributes or capacity) with each scalar value shared."""
        table = self._values
        out: Obj = {}
        for name, value in values.items():
            kept = value
            if type(value) is dict and len(value) == 1:
                slot = next(iter(value.items()))  # e.g. ("string", "Hopper")
                if type(slot[1]) in _SCALARS:
                    # DRA types every value by its key (bool, int, string, version), so equal
                    # slots are equal values: ("int", 1) and ("bool", True) never meet.
                    kept = table.get(slot)
                    if kept is None:
                        if len(table) < self.limit:
                            table[slot] = value
                        kept = value
            out[name] = kept
        return out

    def labels(self, labels: Any) -> Any:
        """A Node's labels with each value shared with equal ones seen before (zones,
        instance types, "true": the same on hundreds of nodes), within the same bound."""
        if type(labels) is not dict:
            return labels
        table = self._values
        out: Obj = {}
        for name, value in labels.items():
            kept = value
            if type(value) is str:
                slot = ("label", value)
                kept = table.get(slot)
                if kept is None:
                    if len(table) < self.limit:
                        table[slot] = value
                    kept = value
            out[name] = kept
        return out

    def device(self, device: Any) -> Any:
        """The device with its attribute and capacity values shared."""
        if type(device) is not dict:
            return device
        out = dict(device)
        for field in ("attributes", "capacity"):
            values = device.get(field)
            if type(values) is dict:
                out[field] = self.values(values)
        return out


def slim(kind: str, obj: Obj, shared: SharedValues | None = None) -> Obj:
    """A new object holding only what policies read of `obj` (a raw object of `kind`).

    With `shared`, the attribute and capacity values of ResourceSlice devices are shared with
    equal ones seen before (the spec is then rebuilt rather than shared with `obj`).
    Never raises: fields of an unexpected type are dropped, except metadata, which is kept as it
    is so that the view's key check reports the problem.
    """
    out: Obj = {"kind": sys.intern(str(kind))}
    meta = obj.get("metadata")
    if kind == "Node":
        if isinstance(meta, dict):
            kept_meta = {key: meta[key] for key in _NODE_METADATA if key in meta}
            if shared is not None and "labels" in kept_meta:
                kept_meta["labels"] = shared.labels(kept_meta["labels"])
            out["metadata"] = kept_meta
        elif meta is not None:
            out["metadata"] = meta
        return out
    if kind == "Pod":
        return _pod(obj, out)
    api_version = obj.get("apiVersion")
    if isinstance(api_version, str):
        out["apiVersion"] = api_version
    if kind == "PriorityClass":
        out.update({k: obj[k] for k in _PRIORITY_CLASS_FIELDS if k in obj})
    if isinstance(meta, dict):
        out["metadata"] = {key: meta[key] for key in KEPT_METADATA if key in meta}
        if kind == "DeviceClass" and "creationTimestamp" in meta:
            out["metadata"]["creationTimestamp"] = meta["creationTimestamp"]
    elif meta is not None:
        out["metadata"] = meta
    if kind == "PodGroup":
        return _pod_group(obj, out)
    if kind in _KEEPS_SPEC and isinstance(spec := obj.get("spec"), dict):
        devices = spec.get("devices")
        if shared is not None and kind == "ResourceSlice" and type(devices) is list:
            spec = {**spec, "devices": [shared.device(d) for d in devices]}
        out["spec"] = spec
    status = obj.get("status")
    if isinstance(status, dict):
        if kind == "ResourceClaim":
            kept = _claim_status(status)
        elif kind == "ResourceQuota":
            kept = {"used": status["used"]} if isinstance(status.get("used"), dict) else None
        else:
            kept = None
        if kept:
            out["status"] = kept
    return out


_CONSUMER_FIELDS = ("apiGroup", "resource", "name", "uid")


def _pod(obj: Obj, out: Obj) -> Obj:
    """Who a pod is and its priority; of its claims, only their names (that it has any)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = {key: meta[key] for key in _POD_METADATA if key in meta}
    elif meta is not None:
        out["metadata"] = meta
    spec = obj.get("spec")
    if isinstance(spec, dict):
        kept = {key: spec[key] for key in _POD_SPEC if key in spec}
        claims = spec.get("resourceClaims")
        if isinstance(claims, list):
            kept["resourceClaims"] = [
                {"name": c["name"]} for c in claims if isinstance(c, dict) and "name" in c
            ]
        out["spec"] = kept
    return out


def _pod_group(obj: Obj, out: Obj) -> Obj:
    """A PodGroup's group claims and the claims made for them; its scheduling policy,
    constraints and conditions are not read."""
    spec, status = obj.get("spec"), obj.get("status")
    claims = spec.get("resourceClaims") if isinstance(spec, dict) else None
    if isinstance(claims, list) and claims:
        out["spec"] = {"resourceClaims": claims}
    made = status.get("resourceClaimStatuses") if isinstance(status, dict) else None
    if isinstance(made, list) and made:
        out["status"] = {"resourceClaimStatuses": made}
    return out


def _claim_status(status: Obj) -> Obj | None:
    """Which devices a claim was allocated and who holds it, without node selectors, configs
    or device status."""
    kept: Obj = {}
    allocation = status.get("allocation")
    if isinstance(allocation, dict):
        devices = allocation.get("devices")
        results = devices.get("results") if isinstance(devices, dict) else None
        if not isinstance(results, list):
            kept["allocation"] = {}
        else:
            kept["allocation"] = {
                "devices": {
                    "results": [
                        {k: r[k] for k in _ALLOCATION_RESULT_FIELDS if r.get(k) is not None}
                        for r in results
                        if isinstance(r, dict)
                    ]
                }
            }
    reserved = status.get("reservedFor")
    if isinstance(reserved, list) and reserved:
        kept["reservedFor"] = [
            {k: c[k] for k in _CONSUMER_FIELDS if isinstance(c.get(k), str)}
            for c in reserved
            if isinstance(c, dict)
        ]
    return kept or None
