"""The DeviceClass defaults' planner as it was before it read claims through the claim model
(`app.k8s.claims`), walking the raw requests itself: the oracle the property test in
test_defaults_model.py holds the current planner to, byte for byte. Not a test module."""

# ruff: noqa
from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.k8s import patch
from app.k8s.patch import PatchOp
from app.policies.defaults import ClaimDefaults

Obj = dict[str, Any]


@dataclass
class Planned:
    """The patch that applies the defaults to one object, and what it adds in words."""

    patch: list[PatchOp] = field(default_factory=list)
    added: list[str] = field(default_factory=list)


CLAIM_SPEC_POINTER = {"ResourceClaim": "/spec", "ResourceClaimTemplate": "/spec/spec"}


def check(request: Request, ctx: Context) -> Result:
    defaults = ctx.parts[claim_defaults]
    if not defaults or request.operation != "CREATE" or request.object is None:
        return ALLOW
    planned = plan(request.kind, request.object, defaults, ctx.namespace_labels)
    if not planned.patch:
        return ALLOW
    name = object_name(request.object) or request.name
    what = f"{request.kind} {name}".rstrip()
    return Result(
        patch=tuple(planned.patch),
        warnings=tuple(f"{what}: dra-webhook added {item}" for item in planned.added),
    )


def old_plan(kind: str, obj: Obj, defaults: ClaimDefaults, labels: Mapping[str, str]) -> Planned:
    """The JSONPatch adding the defaults to a ResourceClaim or ResourceClaimTemplate (pure)."""
    planned = Planned()
    base = CLAIM_SPEC_POINTER.get(kind)
    if base is None or not defaults:
        return planned
    spec: Any = obj
    for token in base.strip("/").split("/"):
        spec = spec.get(token) if isinstance(spec, dict) else None
    if not isinstance(spec, dict):
        return planned
    devices = spec.get("devices")
    if not isinstance(devices, dict) or not isinstance(devices.get("requests"), list):
        return planned
    default_class = defaults.default_class(labels)
    needs: list[tuple[str, Obj, str]] = []
    """(driver, parameters, config target) of class config the requests should get."""

    for index, request in enumerate(devices["requests"]):
        if not isinstance(request, dict):
            continue
        raw_name = request.get("name")
        name = raw_name if isinstance(raw_name, str) else str(index)
        pointer = f"{base}/devices/requests/{index}"
        exactly = request.get("exactly")
        alternatives = request.get("firstAvailable")
        if exactly is None and alternatives is None and "deviceClassName" not in request:
            if default_class is None:
                continue
            filled = _fill({"deviceClassName": default_class}, defaults, needs, name)
            value: Obj = {"deviceClassName": default_class}
            value.update((key, v) for key, v, _ in filled.changes)
            planned.patch.append(patch.add(f"{pointer}/exactly", value))
            added = [f"deviceClassName {default_class} (namespace default)", *filled.added]
            planned.added.append(f"to request {name}: {', '.join(added)}")
        elif isinstance(exactly, dict):
            filled = _fill(exactly, defaults, needs, name, default_class)
            _patch(filled, f"{pointer}/exactly", planned)
            if filled.added:
                planned.added.append(f"to request {name}: {', '.join(filled.added)}")
        elif isinstance(alternatives, list):
            for sub_index, sub in enumerate(alternatives):
                if not isinstance(sub, dict):
                    continue
                raw_sub = sub.get("name")
                sub_name = raw_sub if isinstance(raw_sub, str) else str(sub_index)
                target = f"{name}/{sub_name}"
                filled = _fill(sub, defaults, needs, target, default_class)
                _patch(filled, f"{pointer}/firstAvailable/{sub_index}", planned)
                if filled.added:
                    planned.added.append(f"to request {target}: {', '.join(filled.added)}")

    _plan_config(devices, f"{base}/devices", needs, planned)
    return planned


@dataclass(slots=True)
class _Filled:
    """What the defaults add to one exact request or subrequest, in order."""

    changes: list[tuple[str, Any, bool]] = field(default_factory=list)
    """(member, value, append): add `member`, or with `append` add `value` at its end."""
    added: list[str] = field(default_factory=list)


def _fill(
    request: Obj,
    defaults: ClaimDefaults,
    needs: list[tuple[str, Obj, str]],
    target: str,
    default_class: str | None = None,
) -> _Filled:
    """The defaults one exact request or subrequest lacks (it is not changed)."""
    filled = _Filled()
    changes, added = filled.changes, filled.added
    device_class = request.get("deviceClassName")
    if not device_class and default_class is not None:
        changes.append(("deviceClassName", default_class, False))
        added.append(f"deviceClassName {default_class} (namespace default)")
        device_class = default_class
    class_defaults = defaults.classes.get(device_class) if isinstance(device_class, str) else None
    if class_defaults is None:
        return filled

    if class_defaults.selectors:
        existing = request.get("selectors")
        if existing is None or isinstance(existing, list):
            have = {_expression(s) for s in existing or ()}
            new = [e for e in class_defaults.selectors if e not in have]
            if new:
                values = [{"cel": {"expression": e}} for e in new]
                if not existing:
                    changes.append(("selectors", values, False))
                else:
                    changes.extend(("selectors", v, True) for v in values)
                added.append(f"{len(new)} selector{'s' if len(new) > 1 else ''} of {device_class}")
    if class_defaults.tolerations and request.get("tolerations") is None:
        changes.append(("tolerations", [dict(t) for t in class_defaults.tolerations], False))
        added.append(f"tolerations of {device_class}")
    if (
        class_defaults.count is not None
        and request.get("allocationMode") is None
        and request.get("count") is None
    ):
        changes.append(("count", class_defaults.count, False))
        added.append(f"count {class_defaults.count}")
    needs.extend((driver, parameters, target) for driver, parameters in class_defaults.config)
    return filled


def _patch(filled: _Filled, pointer: str, planned: Planned) -> None:
    for member, value, append in filled.changes:
        where = f"{pointer}/{patch.escape(member)}"
        planned.patch.append(patch.add(f"{where}/-" if append else where, value))


def _expression(selector: Any) -> str | None:
    if isinstance(selector, dict):
        cel = selector.get("cel")
        if isinstance(cel, dict) and isinstance(cel.get("expression"), str):
            expression: str = cel["expression"]
            return expression
    return None


def _plan_config(
    devices: Obj, pointer: str, needs: list[tuple[str, Obj, str]], planned: Planned
) -> None:
    """Opaque config for the drivers whose requests have none from the user."""
    if not needs:
        return
    existing = devices.get("config")
    if existing is not None and not isinstance(existing, list):
        return
    user = list(_user_opaque(existing or []))
    grouped: dict[tuple[str, int], tuple[Obj, list[str]]] = {}
    for driver, parameters, target in needs:
        if any(driver == d and _applies(targets, target) for d, targets in user):
            continue
        key = (driver, id(parameters))
        grouped.setdefault(key, (parameters, []))[1].append(target)
    entries: list[Obj] = [
        {
            "requests": targets,
            "opaque": {"driver": driver, "parameters": copy.deepcopy(parameters)},
        }
        for (driver, _), (parameters, targets) in grouped.items()
    ]
    if not entries:
        return
    if not existing:
        planned.patch.append(patch.add(f"{pointer}/config", entries))
    else:
        planned.patch.extend(patch.add(f"{pointer}/config/-", entry) for entry in entries)
    for entry in entries:
        planned.added.append(
            f"config for driver {entry['opaque']['driver']} "
            f"(requests {', '.join(entry['requests'])})"
        )


def _user_opaque(config: list[Any]) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(driver, requests it applies to; () = all) of each opaque config the user wrote."""
    for entry in config:
        if not isinstance(entry, dict):
            continue
        opaque = entry.get("opaque")
        if not isinstance(opaque, dict) or not isinstance(opaque.get("driver"), str):
            continue
        requests = entry.get("requests")
        targets: tuple[str, ...] = ()
        if isinstance(requests, list):
            targets = tuple(r for r in requests if isinstance(r, str))
        yield opaque["driver"], targets


def _applies(targets: tuple[str, ...], target: str) -> bool:
    """Whether a config entry for `targets` reaches request (or `request/sub`) `target`."""
    return not targets or target in targets or target.split("/", 1)[0] in targets
