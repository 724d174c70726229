"""GPU-sharing names -> one consumable-capacity request per container and rule.

A container's names of one sharing rule (app.config.sharing) form a group: HAMi's
`nvidia.com/gpu: 2` + `nvidia.com/gpumem: 4000` is one group, and becomes one want: two shares
(`count: 2`) on the rule's DeviceClass, each asking for `capacity.requests: {memory: 4000Mi}`.
The plan (app.translation.plan) then treats it like any other want: one claim per container,
content-named templates, init containers sharing, caps. So migrate and dra-only's fix get it too.

Amounts are read as whole numbers (the API server canonicalizes `4000` to `4k` before admission).
A percentage becomes an absolute amount only where the rule says of what size (`percentOf`);
otherwise the pod is denied naming the key to add. A compute limit (HAMi's `gpucores`,
Volcano's `vgpu-cores`) lists candidate capacities (`[cores, compute]`): it asks for the first
that some shareable device of the class publishes (`PublishedCapacities`, a derived index of the
view: a few lookups per request, no scan), and where none does it is removed with a warning (the
device plugin's in-container library enforced it, not the scheduler), as is a name whose entry
has no capacity. Every share request also selects `device.allowMultipleAllocations`: a class
that also matches whole devices would otherwise give a whole GPU (no consumed capacity). A group
whose names all ask for zero asks for nothing: its names are removed, never a claim.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from app.cluster.release import Feature, ServedRelease
from app.cluster.view import ClusterReader, Kind
from app.config.sharing import SharedCapacity, SharingRule
from app.k8s.objects import resource_map
from app.k8s.quantity import parse_quantity, whole_count
from app.translation.legacy import DeviceMapping, LegacyRequest
from app.translation.wants import Problem, Want, count, request_key

SHAREABLE = "device.allowMultipleAllocations"
"""The selector every share request carries."""

_MI = 1 << 20
_DRIVER_TEST = re.compile(r"""device\.driver\s*==\s*(?:"([^"\\]+)"|'([^'\\]+)')""")
"""`device.driver == "<name>"` in a DeviceClass selector: the driver whose devices it holds."""


class PublishedCapacities:
    """Which capacities the shareable devices of each driver publish, and which drivers each
    DeviceClass pins: a derived index of the view (`view.derived(PublishedCapacities)`), kept
    current slice by slice, so choosing among a rule's candidate capacities is a few lookups.

    A class's devices are taken to be the shareable devices of the drivers its selectors name
    with `device.driver == "..."` (no CEL runs here); a class naming none, or not in the view,
    is taken to hold the rule's `driver`. Satisfiability then checks the claim made against the
    devices the class really selects.
    """

    def __init__(self) -> None:
        self._by_slice: dict[str, Counter[tuple[str, str]]] = {}
        self._devices: Counter[tuple[str, str]] = Counter()
        """(driver, qualified capacity) -> shareable devices publishing it."""
        self._class_drivers: dict[str, tuple[str, ...]] = {}

    def on_change(self, kind: Kind, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if kind is Kind.DEVICE_CLASS:
            if old is not None:
                self._class_drivers.pop(_name(old), None)
            if new is not None:
                self._class_drivers[_name(new)] = _pinned_drivers(new)
            return
        if kind is not Kind.RESOURCE_SLICE:
            return
        if old is not None:
            for key, number in self._by_slice.pop(_name(old), Counter()).items():
                left = self._devices[key] - number
                if left > 0:
                    self._devices[key] = left
                else:
                    del self._devices[key]
        if new is not None:
            published = _published(new)
            self._by_slice[_name(new)] = published
            self._devices.update(published)

    def first(self, device_class: str, driver: str, candidates: Iterable[str]) -> str | None:
        """The first of `candidates` some shareable device of `device_class` publishes."""
        drivers = self._class_drivers.get(device_class) or (driver,)
        for name in candidates:
            if any((d, _qualified(name, d)) in self._devices for d in drivers):
                return name
        return None


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _qualified(capacity: str, driver: str) -> str:
    """A capacity name as `<domain>/<name>`: a bare name is the driver's (as the scheduler
    reads `device.capacity`)."""
    return capacity if "/" in capacity else f"{driver}/{capacity}"


def _pinned_drivers(device_class: dict[str, Any]) -> tuple[str, ...]:
    spec = device_class.get("spec")
    selectors = spec.get("selectors") if isinstance(spec, dict) else None
    found: list[str] = []
    for selector in selectors if isinstance(selectors, list) else ():
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expression = cel.get("expression") if isinstance(cel, dict) else None
        if isinstance(expression, str):
            found += [a or b for a, b in _DRIVER_TEST.findall(expression)]
    return tuple(dict.fromkeys(found))


def _published(resource_slice: dict[str, Any]) -> Counter[tuple[str, str]]:
    """(driver, qualified capacity) of each shareable device of a slice."""
    spec = resource_slice.get("spec")
    driver = spec.get("driver") if isinstance(spec, dict) else None
    found: Counter[tuple[str, str]] = Counter()
    if not isinstance(spec, dict) or not isinstance(driver, str):
        return found
    devices = spec.get("devices")
    for device in devices if isinstance(devices, list) else ():
        if not isinstance(device, dict) or device.get("allowMultipleAllocations") is not True:
            continue
        capacity = device.get("capacity")
        if isinstance(capacity, dict):
            found.update((driver, _qualified(str(name), driver)) for name in capacity)
    return found


@dataclass(slots=True)
class Group:
    """One container's names of one sharing rule, in the order the container lists them."""

    index: int
    """The rule's position in the policy's `sharing` list (for messages: sharing[i])."""
    rule: SharingRule
    members: dict[str, LegacyRequest] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Shared:
    """What a group becomes: a want (None when something stops it: the problems), warnings."""

    want: Want | None
    problems: tuple[Problem, ...] = ()
    notes: tuple[str, ...] = ()


class SharingRules:
    """The policy's sharing rules, compiled once: which names they own, and the groups."""

    def __init__(
        self,
        rules: Iterable[SharingRule] = (),
        mapped: Callable[[str], bool] = bool,
        *,
        whole_devices: bool = False,
    ) -> None:
        self.rules = tuple(rules)
        self.whole_devices = whole_devices
        """Where the release drops consumable capacity: a whole device per share (else the
        share is refused); `translation.sharesWithoutCapacity`."""
        self._owner: dict[str, int] = {}
        for index, rule in enumerate(self.rules):
            for name in rule.names:
                self._owner.setdefault(name, index)
        self._alone = frozenset(
            rule.count for rule in self.rules if rule.count and not rule.capacities
        ) | frozenset(rule.count for rule in self.rules if rule.count and not mapped(rule.count))
        """Count names that make a share request on their own (no mapping serves them)."""
        self._counts = frozenset(rule.count for rule in self.rules if rule.count)

    @property
    def counts(self) -> frozenset[str]:
        """The names whose value is a number of shares."""
        return self._counts

    @property
    def names(self) -> frozenset[str]:
        """The legacy names that ask for a share: every capacity name, and the count names
        no mapping serves. (A mapped count, HAMi's `nvidia.com/gpu`, is legacy only where the
        legacy list says so; next to a share's names it is read as the number of shares.)"""
        return frozenset(n for n in self._owner if n not in self._counts or n in self._alone)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def split(self, found: list[LegacyRequest]) -> tuple[list[Group], list[LegacyRequest]]:
        """The sharing groups among `found`, and the requests that are not in one."""
        if not self._owner:
            return [], found
        groups: dict[tuple[str, int], Group] = {}
        for legacy in found:
            index = self._owner.get(legacy.resource)
            if index is None:
                continue
            key = (legacy.container.pointer, index)
            group = groups.get(key)
            if group is None:
                group = groups[key] = Group(index, self.rules[index])
            group.members[legacy.resource] = legacy
        taken: set[int] = set()
        chosen: list[Group] = []
        for group in groups.values():
            rule = group.rule
            if any(name != rule.count for name in group.members) or rule.count in self._alone:
                chosen.append(group)
                taken.update(id(m) for m in group.members.values())
                if rule.count and rule.count not in group.members:
                    _add_count(group, rule.count)
        return chosen, [legacy for legacy in found if id(legacy) not in taken]

    def fix(self, legacy: LegacyRequest) -> str | None:
        """dra-only's one-line fix for a sharing name (None: not part of a share here).

        Read from the name, its amount and which names its container lists, nothing else, so
        the chart's ValidatingAdmissionPolicy prints the same text (admissionpolicy.yaml).
        """
        index = self._owner.get(legacy.resource)
        if index is None:
            return None
        rule = self.rules[index]
        where = f"sharing rule {rule.name}"
        shared = f"use DeviceClass {rule.device_class_name}"
        if legacy.resource == rule.count:
            if rule.count not in self._alone and not _lists_any(legacy, rule):
                return None
            return f"{shared} (count {legacy.amount}, shared, {where})"
        entry = next(c for c in rule.capacities if c.resource == legacy.resource)
        if entry.candidates:
            value = whole_count(legacy.amount)
            amount = f"{value}{entry.unit}" if value is not None else f"{legacy.amount}{entry.unit}"
            return (
                f"{shared} (capacity {' or '.join(entry.candidates)}: {amount} where its devices "
                f"publish one, else removed, {where})"
            )
        if entry.capacity is None:
            return f"removed: DRA has no capacity for it ({where})"
        if entry.percent:
            return f"{shared} (capacity {entry.capacity}: {legacy.amount}% of a device, {where})"
        value = whole_count(legacy.amount)
        amount = f"{value}{entry.unit}" if value is not None else f"{legacy.amount}{entry.unit}"
        return f"{shared} (capacity {entry.capacity}: {amount}, {where})"

    def want(self, group: Group, view: ClusterReader) -> Shared:
        """The request a group becomes, or the problems that stop it (`view`: which capacities
        the class's devices publish, for an entry listing candidates)."""
        rule = group.rule
        members = group.members
        problems: list[Problem] = []
        notes: list[str] = []
        shares = 1
        counted = rule.count is not None and rule.count in members
        if rule.count is not None and counted:
            shares, bad = count(members[rule.count], "whole shares")
            if bad is not None:
                problems.append(bad)
        capacity: dict[str, str] = {}
        sizes: list[str] = []
        asked = False
        for position, entry in enumerate(rule.capacities):
            legacy = members.get(entry.resource)
            if legacy is None:
                continue
            value, bad = count(legacy, _unit_words(entry))
            if bad is not None:
                problems.append(bad)
                continue
            asked = asked or value > 0
            name = _capacity(entry, rule, view)
            if name is None:
                if value > 0:
                    notes.append(_dropped(legacy, entry, rule))
                continue
            if name in capacity:
                problems.append(_twice(legacy, name, members, rule))
                continue
            where = (group.index, position, rule.device_class_name, rule.name)
            amount, bad = _amount(legacy, value, entry, where)
            if bad is not None:
                problems.append(bad)
                continue
            if amount is None:
                continue  # zero: the share consumes the capacity's default
            capacity[name] = amount
            if entry.select_size and entry.percent_of is not None:
                sizes.append(_size_selector(rule, name, entry.percent_of))
        if problems:
            return Shared(None, tuple(problems), tuple(notes))
        if not counted and not asked:
            shares = 0  # every name asks for zero: nothing to share, the plan removes them
        ordered = [members[name] for name in rule.names if name in members]
        release = view.release
        if shares and not release.keeps(Feature.CONSUMABLE_CAPACITY):
            return self._without_capacity(ordered, shares, rule, release, notes)
        selectors = (*rule.selectors, SHAREABLE, *sizes)
        mapping = DeviceMapping(
            rule.device_class_name,
            tuple(dict.fromkeys(selectors)),
            f"sharing:{rule.name}",
            tuple(sorted(capacity.items())),
        )
        return Shared(Want(ordered[0], shares, mapping, tuple(ordered[1:])), (), tuple(notes))

    def _without_capacity(
        self,
        ordered: list[LegacyRequest],
        shares: int,
        rule: SharingRule,
        release: ServedRelease,
        notes: list[str],
    ) -> Shared:
        """A share on a release that drops consumable capacity (and knows no
        `device.allowMultipleAllocations` in CEL): refused, or whole devices where the policy
        says so. Never a claim the API server would store as something else."""
        asked = ", ".join(f"{m.resource}: {m.amount}" for m in ordered)
        why = release.dropped(Feature.CONSUMABLE_CAPACITY)
        first = ordered[0]
        if not self.whole_devices:
            return Shared(
                None,
                (
                    Problem(
                        request_key(first),
                        _field(first),
                        f"{_who(first)} asks for a GPU share ({asked}, sharing rule "
                        f"{rule.name}), which cannot be written as a DRA request here: {why}. "
                        "Ask for whole GPUs, turn the gate on, or set the dra-webhook policy's "
                        "translation.sharesWithoutCapacity: wholeDevices",
                    ),
                ),
                tuple(notes),
            )
        whole = "a whole device" if shares == 1 else f"{shares} whole devices"
        notes.append(
            f"{_who(first)}: {asked} -> {whole} of DeviceClass {rule.device_class_name}, not a "
            f"share: {why} (translation.sharesWithoutCapacity: wholeDevices)"
        )
        mapping = DeviceMapping(
            rule.device_class_name, tuple(dict.fromkeys(rule.selectors)), f"sharing:{rule.name}"
        )
        return Shared(Want(first, shares, mapping, tuple(ordered[1:])), (), tuple(notes))


def _field(legacy: LegacyRequest) -> str:
    which = "limits" if legacy.limit is not None else "requests"
    return f"{legacy.container.path}.resources.{which}[{legacy.resource}]"


def _capacity(entry: SharedCapacity, rule: SharingRule, view: ClusterReader) -> str | None:
    """The capacity an entry asks for: its own, or the first of its candidates that the class's
    devices publish (None: the name is removed)."""
    if not entry.candidates:
        return entry.capacity if isinstance(entry.capacity, str) else None
    try:
        published = view.index(PublishedCapacities)
    except LookupError:  # not subscribed at load: no device is known to publish one
        return None
    return published.first(rule.device_class_name, rule.driver, entry.candidates)


def _dropped(legacy: LegacyRequest, entry: SharedCapacity, rule: SharingRule) -> str:
    """The warning for a name removed without a capacity request."""
    head = (
        f"{_who(legacy)}: {legacy.resource}: {legacy.amount} -> removed: DRA has no capacity "
        f"for it (sharing rule {rule.name})"
    )
    if entry.candidates:
        return (
            f"{head}: no shareable device of DeviceClass {rule.device_class_name} in the "
            f"cluster publishes {' or '.join(entry.candidates)}"
        )
    return (
        f"{head}; map it with `capacity:` in the dra-webhook policy where the driver publishes one"
    )


def _lists_any(legacy: LegacyRequest, rule: SharingRule) -> bool:
    """Whether the container of `legacy` also lists a capacity name of `rule`."""
    ref = legacy.container
    limits, requests = resource_map(ref, "limits"), resource_map(ref, "requests")
    return any(c.resource in limits or c.resource in requests for c in rule.capacities)


def _add_count(group: Group, name: str) -> None:
    """The rule's count name, read from the container when the legacy list does not hold it."""
    ref = next(iter(group.members.values())).container
    limits, requests = resource_map(ref, "limits"), resource_map(ref, "requests")
    if name in limits or name in requests:
        group.members[name] = LegacyRequest(ref, name, limits.get(name), requests.get(name))


def _who(legacy: LegacyRequest) -> str:
    ref = legacy.container
    if ref.is_sidecar:
        return f"sidecar container {ref.name}"
    if ref.field == "initContainers":
        return f"init container {ref.name}"
    return f"container {ref.name}"


def _unit_words(entry: SharedCapacity) -> str:
    if entry.percent:
        return "whole percent"
    return {"Mi": "whole MiB", "Gi": "whole GiB", "Ki": "whole KiB", "Ti": "whole TiB"}.get(
        entry.unit, "whole numbers"
    )


def _amount(
    legacy: LegacyRequest, value: int, entry: SharedCapacity, where: tuple[int, int, str, str]
) -> tuple[str | None, Problem | None]:
    """The capacity request of one legacy amount (None for zero), or why there is none."""
    if value == 0:
        return None, None
    if not entry.percent:
        return f"{value}{entry.unit}", None
    if value > 100:
        return None, Problem(
            request_key(legacy),
            legacy.path,
            f"{value} is not a percentage of a GPU: {legacy.resource} must be 1 to 100",
        )
    if entry.percent_of is None:
        index, position, device_class, rule_name = where
        key = f"sharing[{index}].capacities[{position}]"
        return None, Problem(
            request_key(legacy),
            legacy.path,
            f"{legacy.resource}: {legacy.amount} is a percentage of a GPU's {entry.capacity}, "
            f"and DRA asks for an absolute amount: add `percentOf: <the {entry.capacity} of "
            f"each device of DeviceClass {device_class}, e.g. 80Gi>` (and `selectSize: true` if "
            f"they differ) to the {legacy.resource} entry of sharing rule {rule_name} ({key}) "
            "in the dra-webhook policy, or ask for "
            f"{entry.capacity} as an amount",
        )
    size = parse_quantity(entry.percent_of).value * value / 100
    if size >= _MI:
        return f"{math.ceil(size / _MI)}Mi", None
    return str(math.ceil(size)), None


def _twice(
    legacy: LegacyRequest, capacity: str, members: dict[str, LegacyRequest], rule: SharingRule
) -> Problem:
    others = [
        c.resource
        for c in rule.capacities
        if c.capacity == capacity and c.resource in members and c.resource != legacy.resource
    ]
    return Problem(
        request_key(legacy),
        legacy.path,
        f"{legacy.resource} and {', '.join(others)} both ask for {capacity} of one share "
        f"(sharing rule {rule.name}): give one of them",
    )


def _size_selector(rule: SharingRule, capacity: str, size: str) -> str:
    domain, _, name = capacity.rpartition("/")
    return f'device.capacity["{domain or rule.driver}"].{name}.compareTo(quantity("{size}")) == 0'
