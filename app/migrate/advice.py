"""What to write instead of a DRA object that no conversion carries to resource.k8s.io/v1.

Classic DRA (resource.k8s.io/v1alpha1 in Kubernetes 1.26, v1alpha2 in 1.27-1.30) let a driver's
controller allocate through a ResourceClass and driver-defined parameter objects; structured
parameters (1.30) added ResourceClaimParameters, ResourceClassParameters and named-resources
ResourceSlices. Kubernetes 1.31 replaced all of it with v1alpha3's DeviceClass and device requests,
and 1.32 removed classic DRA. None of these has a field-by-field counterpart in v1: what the
parameters meant is known to the driver only. v1alpha3 (alpha, 1.31-1.33) is the v1beta1 request
shape, but its DeviceClass and ResourceSlice fields changed before beta (a class's suitableNodes
went, device capacities became `{value: ...}`), and no server that serves v1 converts it.

Each case is one line: the field that marks it, and what to write instead, with the names the
object holds (its class, its parameters object, its driver) filled in.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

CLASSIC = ("v1alpha1", "v1alpha2")
ALPHA = "v1alpha3"
REPLACEMENT = "resource.k8s.io/v1"


def unconvertible(obj: Obj, version: str, kind: str) -> tuple[str, str] | None:
    """(field path, what to write instead) for an object of a version no conversion carries to
    v1; None for a version or kind that needs nothing here (v1alpha3's DeviceTaintRule)."""
    if version in CLASSIC:
        return _classic(obj, version, kind)
    if version == ALPHA:
        return _alpha(obj, kind)
    return None


def _classic(obj: Obj, version: str, kind: str) -> tuple[str, str] | None:
    head = (
        f"resource.k8s.io/{version} {kind} is classic DRA (Kubernetes 1.26-1.30, removed in 1.31) "
        f"and has no {REPLACEMENT} conversion"
    )
    if kind == "ResourceClass":
        driver = _text(obj.get("driverName")) or "<driver>"
        name = _text(_get(obj, "metadata", "name")) or "<name>"
        parameters = _reference(obj.get("parametersRef"))
        return (
            "driverName" if "driverName" in obj else "apiVersion",
            f"{head}: write a DeviceClass {name} instead (apiVersion: {REPLACEMENT}, spec: "
            f"{{selectors: [{{cel: {{expression: 'device.driver == \"{driver}\"'}}}}]}})"
            + (
                f"; what {parameters} configured goes into its spec.config[].opaque "
                f"{{driver: {driver}, parameters: ...}}"
                if parameters
                else ""
            )
            + (
                "; suitableNodes has no replacement (the driver's ResourceSlices say which nodes "
                "have devices)"
                if "suitableNodes" in obj
                else ""
            ),
        )
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        prefix = "spec.spec" if kind == "ResourceClaimTemplate" else "spec"
        spec = _get(obj, *prefix.split("."))
        spec = spec if isinstance(spec, dict) else {}
        named = _text(spec.get("resourceClassName"))
        where = f"{prefix}.resourceClassName" if "resourceClassName" in spec else "apiVersion"
        parameters = _reference(spec.get("parametersRef"))
        what = f"the DeviceClass that replaces ResourceClass {named}" if named else "a DeviceClass"
        return (
            where,
            f"{head}: write {prefix} as `devices: {{requests: [{{name: <request>, exactly: "
            f"{{deviceClassName: {named or '<class>'}}}}}]}}` ({what})"
            + (
                f"; what {parameters} asks for becomes exactly.count, exactly.selectors (CEL over "
                "the driver's device attributes) or devices.config[].opaque parameters for the "
                "driver"
                if parameters
                else ""
            )
            + (
                "; allocationMode (Immediate, WaitForFirstConsumer) has no replacement: devices "
                "are allocated when a pod using the claim is scheduled"
                if "allocationMode" in spec
                else ""
            ),
        )
    if kind == "ResourceClaimParameters":
        return (
            "apiVersion",
            f"{head}: it has no v1 kind; fold what it asks for into the claim that names it "
            "(spec.devices.requests[].exactly: count, and selectors in CEL over "
            "device.attributes; driverRequests' vendorParameters into spec.devices.config[]."
            "opaque.parameters), then delete it",
        )
    if kind == "ResourceClassParameters":
        return (
            "apiVersion",
            f"{head}: it has no v1 kind; fold its filters into the DeviceClass's spec.selectors "
            "(CEL over device.attributes) and its vendorParameters into spec.config[].opaque, "
            "then delete it",
        )
    if kind == "ResourceSlice":
        return ("apiVersion", f"{head}: {_published(obj)}")
    if kind == "PodSchedulingContext":
        return ("apiVersion", f"{head}: {_scheduler_only()}")
    return None


def _alpha(obj: Obj, kind: str) -> tuple[str, str] | None:
    head = (
        f"resource.k8s.io/{ALPHA} {kind} (alpha, Kubernetes 1.31-1.33) is served by no release "
        f"that serves {REPLACEMENT} and has no conversion to it"
    )
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        return (
            "apiVersion",
            f"{head}: its device requests read as resource.k8s.io/v1beta1's; set `apiVersion: "
            "resource.k8s.io/v1beta1` once its fields are checked against that API, and run "
            "`dra-webhook migrate` again to move it to v1",
        )
    if kind == "DeviceClass":
        spec = obj.get("spec")
        nodes = isinstance(spec, dict) and "suitableNodes" in spec
        return (
            "spec.suitableNodes" if nodes else "apiVersion",
            f"{head}: set `apiVersion: resource.k8s.io/v1beta1`"
            + (", drop spec.suitableNodes (no replacement: the driver's ResourceSlices say "
               "which nodes have devices)" if nodes else "")
            + " and run `dra-webhook migrate` again",
        )  # fmt: skip
    if kind == "ResourceSlice":
        return ("apiVersion", f"{head}: {_published(obj)}")
    if kind == "PodSchedulingContext":
        return ("apiVersion", f"{head}: {_scheduler_only()}")
    return None


def _published(obj: Obj) -> str:
    driver = _text(obj.get("driverName")) or _text(_get(obj, "spec", "driver"))
    return (
        f"ResourceSlices are published by the DRA driver{f' {driver}' if driver else ''}'s "
        f"kubelet plugin, not written by hand: run a driver release that publishes "
        f"{REPLACEMENT} and delete this manifest"
    )


def _scheduler_only() -> str:
    return (
        "kube-scheduler wrote it for classic DRA, removed in Kubernetes 1.32; it has no v1 kind: "
        "delete this manifest"
    )


def _reference(ref: Any) -> str:
    """`GpuClaimParameters multiple-gpus` from a parametersRef."""
    if not isinstance(ref, dict):
        return ""
    kind, name = _text(ref.get("kind")), _text(ref.get("name"))
    return f"{kind or 'parameters'} {name}".strip() if kind or name else ""


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _text(value: Any) -> str:
    """A name read from the object, fit for a one-line message."""
    if not isinstance(value, str):
        return ""
    text = " ".join(value.split())
    return text if len(text) <= 80 else text[:77] + "..."
