"""A DeviceTaintRule read off its raw JSON, in every `resource.k8s.io` version that serves it.

DeviceTaintRule is cluster-scoped: `v1alpha3` from 1.33 (acted on only with the DRADeviceTaints
gate, and DRADeviceTaintRules from 1.35), `v1beta2` from 1.36, `v1` in 1.37 (GA, on). Its
`spec.deviceSelector` (k8s.io/api `resource/<version>/types.go`, `DeviceTaintSelector`) is:

| field | 1.33-1.34 (v1alpha3) | 1.35 on (every version) |
| --- | --- | --- |
| `driver`, `pool`, `device` | exact names | exact names |
| `deviceClassName` | the class's CEL selectors must match | gone |
| `selectors[].cel.expression` | CEL, as a claim's | gone |

and `spec.taint` is {key, value, effect, timeAdded}, effect `NoSchedule` or `NoExecute`, and
`None` (informational) from 1.35. Without a `deviceSelector` a rule selects nothing from 1.35
(the tracker and the eviction controller skip it) but every device on 1.34 (its tracker only
filters when the selector is set); an empty one selects every device on every release.

The reader never raises anything but `ObjectShapeError`, whose path names the field (a denial,
not a traceback).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.errors import ObjectShapeError

EFFECTS = ("NoExecute", "NoSchedule", "None")
"""What a taint does: evict the pods holding a device, keep new allocations off it, nothing."""
NO_EXECUTE, NO_SCHEDULE, NO_EFFECT = EFFECTS
GROUP = "resource.k8s.io"
KIND = "DeviceTaintRule"
NIL_SELECTS_ALL_UNTIL = 34
"""The last minor release whose tracker applies a rule without `deviceSelector` to every device
(k8s.io/dynamic-resource-allocation 0.34 `resourceslice/tracker`: it filters only when the
selector is set; 0.35 on: "No selector matches no devices")."""


@dataclass(frozen=True, slots=True)
class TaintRule:
    """What a DeviceTaintRule selects and the taint it puts on the devices."""

    name: str
    key: str
    value: str
    effect: str
    has_selector: bool
    """`spec.deviceSelector` is set (even empty)."""
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    device_class: str | None = None
    """`deviceClassName` (v1alpha3 of 1.33-1.34 only)."""
    selectors: tuple[tuple[str, str], ...] = ()
    """(field path, CEL expression) of `selectors[].cel` (v1alpha3 of 1.33-1.34 only)."""
    uid: str = ""
    api_version: str = ""

    @property
    def uses_cel(self) -> bool:
        return self.device_class is not None or bool(self.selectors)

    def selects_all(self, minor: int | None) -> bool:
        """Whether the rule selects every device in the cluster on release 1.`minor` (None:
        the newest behaviour): an empty selector, or none at all on 1.34 and older."""
        if not self.has_selector:
            return minor is not None and minor <= NIL_SELECTS_ALL_UNTIL
        return (
            self.driver is None and self.pool is None and self.device is None and not self.uses_cel
        )

    def selects_none(self, minor: int | None) -> bool:
        """No selector: nothing, from 1.35 (and where the release is unknown)."""
        return not self.has_selector and not self.selects_all(minor)

    def names(self, driver: str, pool: str, device: str) -> bool:
        """Whether a device's names pass `driver`, `pool` and `device` (the CEL part aside):
        upstream's `ruleMatchesDevice`, which the eviction controller runs on each allocated
        device."""
        return (
            (self.driver is None or self.driver == driver)
            and (self.pool is None or self.pool == pool)
            and (self.device is None or self.device == device)
        )

    def describe_selector(self) -> str:
        """`driver gpu.example.com, pool node-1, device gpu-0`; `every device` when empty."""
        parts = [
            f"{label} {value}"
            for label, value in (
                ("driver", self.driver),
                ("pool", self.pool),
                ("device", self.device),
                ("DeviceClass", self.device_class),
            )
            if value is not None
        ]
        parts.extend(f"selector {expression!r}" for _, expression in self.selectors)
        if not self.has_selector:
            return "no deviceSelector"
        return ", ".join(parts) if parts else "an empty deviceSelector (every device)"

    def describe_taint(self) -> str:
        """`example.com/maintenance=drain:NoExecute`, as kubectl prints node taints."""
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


def _map(value: Any, path: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ObjectShapeError(path, "must be an object")
    return value


def _text(value: Any, path: str, *, required: bool = False) -> str | None:
    if value is None:
        if required:
            raise ObjectShapeError(path, "is required")
        return None
    if not isinstance(value, str):
        raise ObjectShapeError(path, "must be a string")
    return value


def parse_taint_rule(obj: Any) -> TaintRule:
    """The rule of a raw DeviceTaintRule object; `ObjectShapeError` naming the field when a
    part is not what the API defines (the API server validated what it sends; `check` and
    `report` read files)."""
    if not isinstance(obj, Mapping):
        raise ObjectShapeError("object", "must be an object")
    meta = _map(obj.get("metadata"), "metadata") or {}
    name = _text(meta.get("name"), "metadata.name") or ""
    uid = _text(meta.get("uid"), "metadata.uid") or ""
    api_version = obj.get("apiVersion")
    spec = _map(obj.get("spec"), "spec")
    if spec is None:
        raise ObjectShapeError("spec", "is required")
    taint = _map(spec.get("taint"), "spec.taint")
    if taint is None:
        raise ObjectShapeError("spec.taint", "is required")
    key = _text(taint.get("key"), "spec.taint.key", required=True) or ""
    value = _text(taint.get("value"), "spec.taint.value") or ""
    effect = _text(taint.get("effect"), "spec.taint.effect", required=True) or ""
    if effect not in EFFECTS:
        raise ObjectShapeError(
            "spec.taint.effect", f"{effect!r} is not one of {', '.join(EFFECTS)}"
        )
    selector = _map(spec.get("deviceSelector"), "spec.deviceSelector")
    if selector is None:
        return TaintRule(name, key, value, effect, False, uid=uid, api_version=str(api_version))
    where = "spec.deviceSelector"
    return TaintRule(
        name,
        key,
        value,
        effect,
        True,
        driver=_text(selector.get("driver"), f"{where}.driver"),
        pool=_text(selector.get("pool"), f"{where}.pool"),
        device=_text(selector.get("device"), f"{where}.device"),
        device_class=_text(selector.get("deviceClassName"), f"{where}.deviceClassName"),
        selectors=_selectors(selector.get("selectors"), f"{where}.selectors"),
        uid=uid,
        api_version=str(api_version) if isinstance(api_version, str) else "",
    )


def _selectors(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ObjectShapeError(path, "must be a list")
    found: list[tuple[str, str]] = []
    for i, entry in enumerate(value):
        item = _map(entry, f"{path}[{i}]") or {}
        cel = _map(item.get("cel"), f"{path}[{i}].cel")
        if cel is None:
            continue  # (no other kind of selector exists yet; the API server refuses one empty)
        expression = _text(cel.get("expression"), f"{path}[{i}].cel.expression", required=True)
        found.append((f"{path}[{i}].cel.expression", expression or ""))
    return tuple(found)


def tolerates(toleration: Any, key: str, value: str, effect: str) -> bool:
    """Whether one device toleration (raw) tolerates the taint: k8s.io/dynamic-resource-allocation
    `resourceclaim.ToleratesTaint` (an empty effect or key matches any, `Exists` any value,
    `Equal` or no operator the same value)."""
    if not isinstance(toleration, Mapping):
        return False
    t_effect, t_key = toleration.get("effect") or "", toleration.get("key") or ""
    if t_effect and t_effect != effect:
        return False
    if t_key and t_key != key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == value
    return bool(operator == "Exists")


def tolerated_forever(tolerations: Any, key: str, value: str) -> bool:
    """Whether an allocated device's tolerations keep its pods from a NoExecute taint for good.

    Only a toleration whose effect is NoExecute *in so many words* counts, and only one without
    `tolerationSeconds` (with it, eviction is delayed, not avoided): the eviction controller
    (pkg/controller/devicetainteviction `claimEvictionTime`) checks `toleration.Effect ==
    NoExecute` before `ToleratesTaint`, so `{operator: Exists}`, which lets the scheduler
    allocate a NoExecute-tainted device, does not keep its pods from being evicted.
    """
    if not isinstance(tolerations, list):
        return False
    return any(
        isinstance(t, Mapping)
        and t.get("effect") == NO_EXECUTE
        and t.get("tolerationSeconds") is None
        and tolerates(t, key, value, NO_EXECUTE)
        for t in tolerations
    )
