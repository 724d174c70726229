"""What the cluster view keeps of each object: only the fields some policy reads.

A ResourceClaim as the API server sends it carries managedFields, annotations, the pods that
reserve it (`status.reservedFor`, up to 256 entries) and per-device status; none of that is read by
a policy, and on a large cluster it is most of the memory. Kept, per kind:

| kind | kept besides the common metadata |
| --- | --- |
| Namespace | nothing (the mode label is in `metadata.labels`) |
| DeviceClass, ResourceSlice, ResourceClaimTemplate | `spec` |
| ResourceClaim | `spec`; `status.allocation.devices.results[]` as {request, driver, pool, device} |
| ResourceQuota | `spec`, `status.used` |

Common metadata: name, namespace, labels, uid, resourceVersion, generation, deletionTimestamp.
`spec` is shared with the decoded object, not copied: slimming costs two small dicts per object.
Slimming a slimmed object gives an equal object, so sources may slim early (per list page, to
bound peak memory) and the view slims again on `apply`/`replace`.

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
_ALLOCATION_RESULT_FIELDS = ("request", "driver", "pool", "device")


def slim(kind: str, obj: Obj) -> Obj:
    """A new object holding only what policies read of `obj` (a raw object of `kind`).

    Never raises: fields of an unexpected type are dropped, except metadata, which is kept as it
    is so that the view's key check reports the problem.
    """
    out: Obj = {"kind": sys.intern(str(kind))}
    api_version = obj.get("apiVersion")
    if isinstance(api_version, str):
        out["apiVersion"] = api_version
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = {key: meta[key] for key in KEPT_METADATA if key in meta}
    elif meta is not None:
        out["metadata"] = meta
    if kind in _KEEPS_SPEC and isinstance(spec := obj.get("spec"), dict):
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


def _claim_status(status: Obj) -> Obj | None:
    """Which devices a claim was allocated, without node selectors, configs or device status."""
    allocation = status.get("allocation")
    if not isinstance(allocation, dict):
        return None
    devices = allocation.get("devices")
    results = devices.get("results") if isinstance(devices, dict) else None
    if not isinstance(results, list):
        return {"allocation": {}}
    return {
        "allocation": {
            "devices": {
                "results": [
                    {k: r[k] for k in _ALLOCATION_RESULT_FIELDS if k in r}
                    for r in results
                    if isinstance(r, dict)
                ]
            }
        }
    }
