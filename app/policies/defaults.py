"""DeviceClass defaults: fill what a claim's requests leave out, from the admin's policy.

On CREATE of a ResourceClaim or ResourceClaimTemplate, for each device request (and each
`firstAvailable` alternative):

- `deviceClassName`, when missing, from the first `defaults.namespaceDeviceClasses` entry whose
  selector matches the namespace (a request with neither `exactly` nor `firstAvailable` gets an
  `exactly` with that class);
- then, from `defaults.deviceClasses[<class>]`: `selectors` appended (those not already there),
  `tolerations` when the request has none, `count` when it has neither `allocationMode` nor
  `count`, and opaque `config` for a driver when the claim has no opaque config for that driver
  that applies to the request.

Nothing the user wrote is replaced or removed; every change is an `add` of a missing member or
an append to a list, and a warning lists what was added.

The API server defaults `allocationMode: ExactCount` and `count: 1` before any webhook sees the
object, so the `count` default only takes effect for objects that reach it undefaulted:
templates built by translation (`apply_to_template`) and files checked offline.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.cel.cache import CompileCache
from app.cel.engine import SELECTOR, Engine
from app.cel.errors import CelCompileError, does_not_compile
from app.cluster.release import Feature
from app.config.policy import Defaults
from app.errors import PolicyError
from app.k8s import patch
from app.k8s.claims import Alternative, Branch, ClaimSpec, parse_claim_spec
from app.k8s.labels import Selector
from app.k8s.patch import PatchOp
from app.policies.base import ALLOW, Context, Obj, Request, Result, subject
from app.policies.cel_runtime import cel_runtime
from app.policies.parts import Parts


@dataclass(frozen=True, slots=True)
class _ClassDefaults:
    selectors: tuple[str, ...]
    config: tuple[tuple[str, Obj], ...]
    """(driver, parameters)."""
    tolerations: tuple[Obj, ...]
    count: int | None


class ClaimDefaults:
    """The `defaults` section compiled once: per-class values as the JSON they are added as."""

    def __init__(self, defaults: Defaults) -> None:
        self.classes: Mapping[str, _ClassDefaults] = {
            name: _ClassDefaults(
                selectors=d.selectors,
                config=tuple((c.driver, dict(c.parameters)) for c in d.config),
                tolerations=tuple(
                    t.model_dump(by_alias=True, exclude_none=True) for t in d.tolerations
                ),
                count=d.count,
            )
            for name, d in defaults.device_classes.items()
        }
        self.namespace_classes: tuple[tuple[Selector, str], ...] = tuple(
            (Selector.from_policy(entry.namespace_selector), entry.device_class_name)
            for entry in defaults.namespace_device_classes
        )

    def __bool__(self) -> bool:
        return bool(self.classes or self.namespace_classes)

    def default_class(self, labels: Mapping[str, str]) -> str | None:
        for selector, device_class in self.namespace_classes:
            if selector.matches(labels):
                return device_class
        return None


def compile_selectors(defaults: Defaults, engine: Engine, cache: CompileCache) -> None:
    """Compile every default selector at load (into the shared cache, so the selector check
    later finds them compiled); a bad one raises PolicyError naming its class and position."""
    for device_class, class_defaults in defaults.device_classes.items():
        for index, expression in enumerate(class_defaults.selectors):
            try:
                cache.get(engine, expression, SELECTOR)
            except CelCompileError as error:
                raise PolicyError(
                    f"policy: defaults.deviceClasses.{device_class}.selectors[{index}] "
                    f"{does_not_compile(error, expression)}"
                ) from None


def claim_defaults(parts: Parts) -> ClaimDefaults:
    """Builder: the `defaults` section, its selectors compiled into the shared CEL cache."""
    runtime = parts.build(cel_runtime)
    compile_selectors(parts.policy.defaults, runtime.engine, runtime.cache)
    return ClaimDefaults(parts.policy.defaults)


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
    release = ctx.view.release
    dropped = (
        None if release.keeps(Feature.DEVICE_TAINTS) else release.dropped(Feature.DEVICE_TAINTS)
    )
    planned = plan(
        request.kind,
        request.object,
        defaults,
        ctx.namespace_labels,
        dropped,
        decoded=request.claim_spec(),
    )
    if not planned.patch and not planned.added:
        return ALLOW
    what = subject(request)
    return Result(
        patch=tuple(planned.patch),
        warnings=tuple(f"{what}: dra-webhook added {item}" for item in planned.added),
    )


def plan(
    kind: str,
    obj: Obj,
    defaults: ClaimDefaults,
    labels: Mapping[str, str],
    tolerations_dropped: str | None = None,
    *,
    decoded: ClaimSpec | None = None,
) -> Planned:
    """The JSONPatch adding the defaults to a ResourceClaim or ResourceClaimTemplate (pure).

    The claim is read by the claim model (`app.k8s.claims`): which member of a request holds
    its alternatives, each alternative's class and selectors, the user's opaque config. What a
    patch needs beyond those values is how the document is written (whether a member is there,
    to `add` it or append to it), read from the dict each model value was read from.

    `tolerations_dropped`: why the release would drop a request's tolerations (app.cluster.
    release); the class's tolerations are then not added, and `added` says so. `decoded`: the
    claim spec as the request decoded it (`base.decode`), else it is read here (migrate)."""
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
    claim = decoded or parse_claim_spec(spec, base.strip("/").replace("/", "."))
    if claim.errors:
        return planned  # (more requests than the API server takes: it refuses the object)
    default_class = defaults.default_class(labels)
    needs: list[tuple[str, Obj, str]] = []
    """(driver, parameters, config target) of class config the requests should get."""

    for index, (request, raw) in enumerate(zip(claim.requests, devices["requests"], strict=True)):
        if not isinstance(raw, dict):
            continue
        raw_name = raw.get("name")
        name = raw_name if isinstance(raw_name, str) else str(index)
        pointer = f"{base}/devices/requests/{index}"
        exactly, first = _written(request.exactly), _written(request.first_available)
        if exactly is None and first is None and not request.has_device_class:
            if default_class is None:
                continue
            body: Obj = {"deviceClassName": default_class}
            filled = _fill(None, body, defaults, needs, name, dropped=tolerations_dropped)
            value: Obj = {"deviceClassName": default_class}
            value.update((key, v) for key, v, _ in filled.changes)
            planned.patch.append(patch.add(f"{pointer}/exactly", value))
            added = [f"deviceClassName {default_class} (namespace default)", *filled.added]
            planned.added.append(f"to request {name}: {', '.join(added)}")
        elif exactly is not None and exactly.alternatives:  # `exactly` is an object
            filled = _fill(
                exactly.alternatives[0],
                raw["exactly"],
                defaults,
                needs,
                name,
                default_class=default_class,
                dropped=tolerations_dropped,
            )
            _patch(filled, f"{pointer}/exactly", planned)
            if filled.added:
                planned.added.append(f"to request {name}: {', '.join(filled.added)}")
        elif first is not None and not first.errors:  # `firstAvailable` is a list
            subs = zip(first.alternatives, raw["firstAvailable"], strict=True)
            for sub_index, (alternative, sub) in enumerate(subs):
                if not isinstance(sub, dict):
                    continue
                raw_sub = sub.get("name")
                sub_name = raw_sub if isinstance(raw_sub, str) else str(sub_index)
                target = f"{name}/{sub_name}"
                filled = _fill(
                    alternative,
                    sub,
                    defaults,
                    needs,
                    target,
                    default_class=default_class,
                    dropped=tolerations_dropped,
                )
                _patch(filled, f"{pointer}/firstAvailable/{sub_index}", planned)
                if filled.added:
                    planned.added.append(f"to request {target}: {', '.join(filled.added)}")

    _plan_config(devices, claim, f"{base}/devices", needs, planned)
    return planned


def _written(branch: Branch | None) -> Branch | None:
    """The member of a request, when it is written with a value (not absent, not null)."""
    return branch if branch is not None and branch.written else None


@dataclass(slots=True)
class _Filled:
    """What the defaults add to one exact request or subrequest, in order."""

    changes: list[tuple[str, Any, bool]] = field(default_factory=list)
    """(member, value, append): add `member`, or with `append` add `value` at its end."""
    added: list[str] = field(default_factory=list)


def _fill(
    alternative: Alternative | None,
    body: Obj,
    defaults: ClaimDefaults,
    needs: list[tuple[str, Obj, str]],
    target: str,
    *,
    default_class: str | None = None,
    dropped: str | None = None,
) -> _Filled:
    """The defaults one exact request or subrequest lacks (it is not changed). `alternative` is
    the model's reading of `body` (None for an `exactly` the namespace default makes)."""
    filled = _Filled()
    changes, added = filled.changes, filled.added
    if alternative is None:
        device_class: str = body["deviceClassName"]
    elif _has_error(alternative, "deviceClassName"):
        if alternative.device_class:
            return filled  # written, not a string: no class, no defaults
        device_class = ""  # written, empty and not a string: as absent
    else:
        device_class = alternative.device_class  # "" when absent
    if not device_class and default_class is not None:
        changes.append(("deviceClassName", default_class, False))
        added.append(f"deviceClassName {default_class} (namespace default)")
        device_class = default_class
    class_defaults = defaults.classes.get(device_class) if device_class else None
    if class_defaults is None:
        return filled

    if class_defaults.selectors:
        existing = body.get("selectors")
        if existing is None or isinstance(existing, list):
            have = {e for _, e in alternative.selectors} if alternative is not None else set()
            new = [e for e in class_defaults.selectors if e not in have]
            if new:
                values = [{"cel": {"expression": e}} for e in new]
                if not existing:
                    changes.append(("selectors", values, False))
                else:
                    changes.extend(("selectors", v, True) for v in values)
                added.append(f"{len(new)} selector{'s' if len(new) > 1 else ''} of {device_class}")
    if class_defaults.tolerations and body.get("tolerations") is None:
        if dropped is None:
            changes.append(("tolerations", [dict(t) for t in class_defaults.tolerations], False))
            added.append(f"tolerations of {device_class}")
        else:
            added.append(f"no tolerations of {device_class}: {dropped}")
    if (
        class_defaults.count is not None
        and body.get("allocationMode") is None
        and body.get("count") is None
    ):
        changes.append(("count", class_defaults.count, False))
        added.append(f"count {class_defaults.count}")
    needs.extend((driver, parameters, target) for driver, parameters in class_defaults.config)
    return filled


def _has_error(alternative: Alternative, member: str) -> bool:
    where = f"{alternative.path}.{member}"
    return any(error.path == where for error in alternative.errors)


def _patch(filled: _Filled, pointer: str, planned: Planned) -> None:
    for member, value, append in filled.changes:
        where = f"{pointer}/{patch.escape(member)}"
        planned.patch.append(patch.add(f"{where}/-" if append else where, value))


def _plan_config(
    devices: Obj,
    claim: ClaimSpec,
    pointer: str,
    needs: list[tuple[str, Obj, str]],
    planned: Planned,
) -> None:
    """Opaque config for the drivers whose requests have none from the user."""
    if not needs:
        return
    existing = devices.get("config")
    if existing is not None and not isinstance(existing, list):
        return
    user = [(c.driver, c.requests) for c in claim.config if c.driver is not None]
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


def _applies(targets: tuple[str, ...], target: str) -> bool:
    """Whether a config entry for `targets` reaches request (or `request/sub`) `target`."""
    return not targets or target in targets or target.split("/", 1)[0] in targets


def apply_to_template(
    template: Obj, defaults: ClaimDefaults, labels: Mapping[str, str]
) -> tuple[Obj, tuple[str, ...]]:
    """A copy of a ResourceClaimTemplate with the defaults applied, and what was added (the
    template itself when nothing is).

    For templates the webhook builds itself (translation, through :func:`translation_hook`),
    which never pass through `/mutate` before they are created from within a review.
    """
    planned = plan("ResourceClaimTemplate", template, defaults, labels)
    if not planned.patch:
        return template, ()
    result = copy.deepcopy(template)
    for op in planned.patch:
        _apply_add(result, op["path"], copy.deepcopy(op["value"]))
    return result, tuple(planned.added)


def translation_hook(defaults: ClaimDefaults) -> Callable[[Obj, str], Obj]:
    """A translation template hook (`TemplateHook`): the class defaults on a ResourceClaimSpec.

    Translation names every class it asks for, so the namespace default class never applies and
    the result depends only on the spec: translation memoizes it per shape and names the
    template from the defaulted content.
    """

    def hook(spec: Obj, namespace: str) -> Obj:
        applied, _ = apply_to_template({"spec": {"spec": spec}}, defaults, {})
        result: Obj = applied["spec"]["spec"]
        return result

    return hook


def _apply_add(document: Obj, pointer: str, value: Any) -> None:
    """Apply one `add` op of the kind `plan` makes (member add, or append with `-`)."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.lstrip("/").split("/")]
    node: Any = document
    for token in tokens[:-1]:
        node = node[int(token)] if isinstance(node, list) else node[token]
    last = tokens[-1]
    if isinstance(node, list):
        if last == "-":
            node.append(value)
        else:
            node.insert(int(last), value)
    else:
        node[last] = value
