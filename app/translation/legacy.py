"""Finding legacy extended-resource requests, and mapping them to DRA device requests.

Shared by dra-only enforcement (which names the fix) and translation (which applies it).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from app.bounded import BoundedCache, CacheName
from app.cluster.view import ClusterReader
from app.config.policy import LegacyResources, MappingRule
from app.k8s.names import is_dns_subdomain
from app.k8s.objects import ContainerRef, PodSpecRef, containers, resource_map
from app.k8s.quantity import is_zero
from app.regex import compile_re2, glob_to_re2

IMPLICIT_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
"""Extended resources of this form name their DeviceClass directly (KEP-5004)."""

_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SELECTOR_CAPTURE = re.compile(r"[A-Za-z0-9._-]*")
"""What a `$n` capture may hold to be pasted into a CEL selector: nothing that ends a string
literal, escapes, or starts another expression."""


def is_resource_name(name: str) -> bool:
    """Whether `name` is a valid Kubernetes resource name (a qualified name).

    An optional DNS-subdomain prefix of at most 253 characters and `/`, then a name of at most 63
    characters of letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit.
    The mutating webhook sees names before the API server validates them: nothing else may be
    mapped or translated.
    """
    prefix, slash, part = name.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return False
    return len(part) <= 63 and _NAME_PART.fullmatch(part) is not None


_UNKNOWN = object()


class LegacyMatcher:
    """Decides whether a resource name is a legacy (device-plugin) extended resource."""

    keeps_zeros = False
    """Whether `legacy_requests` keeps requests of zero by default (see `keeping_zeros`)."""

    def __init__(self, config: LegacyResources, extra: Iterable[str] = ()) -> None:
        """`extra`: more exact names (those of the sharing rules)."""
        self._exact = frozenset(n for n in config.names if not _is_glob(n)) | frozenset(extra)
        globs = [glob_to_re2(n) for n in config.names if _is_glob(n)]
        # RE2: the names matched come from users (any key of a container's limits)
        self._pattern = compile_re2("|".join(globs)) if globs else None
        # names come from users (any key of a container's limits): the memo is bounded
        self._seen: BoundedCache[str, bool] = BoundedCache(CacheName.LEGACY_NAMES, 4096)
        self._known = self._seen.reader()
        """A hit without the LRU's bookkeeping (every resource name of every container of every
        review is asked about): counted, not refreshed; a miss goes through `get`."""

    def keeping_zeros(self) -> LegacyMatcher:
        """The same names, for a reader that removes requests of zero rather than ignoring
        them (`migrate`: a manifest asking only for `nvidia.com/gpu: 0` is rewritten too)."""
        other = copy.copy(self)
        other.keeps_zeros = True  # (the same memo: `_known` reads it)
        return other

    def __call__(self, name: str) -> bool:
        known = self._known(name)
        if known is not None:
            self._seen.hits += 1  # (counted as `get` counts it, without refreshing the entry)
            return known
        known = self._seen.get(name)
        if known is None:
            known = name in self._exact or bool(self._pattern and self._pattern.fullmatch(name))
            self._seen.put(name, known)
        return known


def _is_glob(name: str) -> bool:
    return any(ch in name for ch in "*?[")


@dataclass(frozen=True, slots=True)
class DeviceMapping:
    """The DRA request a legacy name becomes: a DeviceClass plus CEL selectors."""

    device_class_name: str
    selectors: tuple[str, ...] = ()
    source: str = "config"
    """Where the mapping came from: config, deviceclass (extendedResourceName), implicit, or
    sharing:<rule>."""
    capacity: tuple[tuple[str, str], ...] = ()
    """`capacity.requests` of each device (a share), as (capacity name, quantity), sorted."""
    leave: bool | None = None
    """A `mappings` rule's `leaveToScheduler` (None: unset, `translation.leaveMapped` decides)."""


class MappingResolver:
    """Legacy name -> DeviceMapping: config rules first, then DeviceClasses, then implicit names."""

    def __init__(self, rules: tuple[MappingRule, ...]) -> None:
        self._rules = [
            (rule, compile_re2(rule.resource) if rule.pattern else None) for rule in rules
        ]
        self.leaves = any(rule.leave_to_scheduler for rule in rules)
        """Whether a rule asks for its names to be left to the scheduler (`leaveToScheduler`)."""
        self._memo: BoundedCache[str, DeviceMapping | str | None] = BoundedCache(
            CacheName.MAPPINGS, 4096
        )
        """Resource -> its config mapping, or why the rule that matched it gave none."""

    def _from_config(self, resource: str) -> DeviceMapping | str | None:
        known = self._memo.get(resource, _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
        found: DeviceMapping | str | None = None
        for rule, regex in self._rules:
            if regex is None:
                if rule.resource == resource:
                    found = DeviceMapping(
                        rule.device_class_name, rule.selectors, leave=rule.leave_to_scheduler
                    )
                    break
                continue
            match = regex.fullmatch(resource)
            if match:
                found = expand_rule(rule, match)
                break
        return self._memo.put(resource, found)

    def maps(self, resource: str) -> bool:
        """Whether a `mappings` rule of the policy maps `resource` (not the cluster's classes)."""
        return is_resource_name(resource) and isinstance(self._from_config(resource), DeviceMapping)

    def resolve(self, resource: str, view: ClusterReader) -> DeviceMapping | None:
        """The mapping of a legacy name; None for a name that is not a valid resource name."""
        if not is_resource_name(resource):
            return None
        found = self._from_config(resource)
        if isinstance(found, DeviceMapping):
            return found
        device_class = view.device_class_for_extended_resource(resource)
        if device_class is not None:
            return DeviceMapping(device_class, (), "deviceclass")
        if resource.startswith(IMPLICIT_CLASS_PREFIX):
            implicit = resource.removeprefix(IMPLICIT_CLASS_PREFIX)
            if is_dns_subdomain(implicit):
                return DeviceMapping(implicit, (), "implicit")
        return None

    def missing_hint(self, resource: str) -> str:
        """What makes `resource` resolvable: the policy key to add, or a DeviceClass field."""
        if is_resource_name(resource):
            refused = self._from_config(resource)
            if isinstance(refused, str):
                return refused
        return (
            f"add `mappings: [{{resource: {resource}, deviceClassName: <class>}}]` to the "
            f"dra-webhook policy, or set `spec.extendedResourceName: {resource}` on the "
            "DeviceClass that serves it"
        )


_GROUP_REF = re.compile(r"\$(\d+)")


def expand_rule(rule: MappingRule, match: Any) -> DeviceMapping | str:
    """The mapping of a pattern rule for one name, its `$n` replaced by the groups of `match`.

    A capture pasted into a selector may only hold letters, digits, `.`, `_` and `-` (it must not
    end the CEL string literal it is put in, or add an expression of its own); one pasted into
    `deviceClassName` must be a DNS subdomain, and so must the result. Otherwise there is no
    mapping: the reason is returned instead.
    """
    device_class = _expand(rule.device_class_name, match, is_dns_subdomain)
    if device_class is None or not is_dns_subdomain(device_class):
        return (
            f"the mapping rule {rule.resource!r} matches, but its groups do not make "
            f"deviceClassName {rule.device_class_name!r} a valid DeviceClass name (a DNS subdomain)"
        )
    selectors: list[str] = []
    for selector in rule.selectors:
        expanded = _expand(selector, match, _selector_capture)
        if expanded is None:
            return (
                f"the mapping rule {rule.resource!r} matches, but a group it pastes into a "
                "selector holds characters other than letters, digits, '.', '_' and '-'"
            )
        selectors.append(expanded)
    return DeviceMapping(device_class, tuple(selectors), leave=rule.leave_to_scheduler)


def _selector_capture(value: str) -> bool:
    return _SELECTOR_CAPTURE.fullmatch(value) is not None


def _expand(template: str, match: Any, allowed: Callable[[str], bool]) -> str | None:
    """`template` with each `$n` replaced by group n of `match`; None if a group is not allowed."""
    refused = False

    def group(ref: re.Match[str]) -> str:
        nonlocal refused
        value = match.group(int(ref.group(1))) or ""
        if not allowed(value):
            refused = True
        return value

    expanded = _GROUP_REF.sub(group, template)
    return None if refused else expanded


@dataclass(frozen=True, slots=True)
class LegacyRequest:
    """One legacy extended resource asked for by one container (in limits, requests or both)."""

    container: ContainerRef
    resource: str
    limit: Any
    request: Any

    @property
    def amount(self) -> Any:
        """The raw quantity asked for (the limit wins: the API server copies it to requests)."""
        return self.limit if self.limit is not None else self.request

    @property
    def path(self) -> str:
        which = "limits" if self.limit is not None else "requests"
        return f"{self.container.path}.resources.{which}[{self.resource}]"


def legacy_requests(
    spec: PodSpecRef, is_legacy: LegacyMatcher, *, zeros: bool | None = None
) -> list[LegacyRequest]:
    """Every (container, legacy resource) pair in a pod spec, in container order.

    A request of zero (`nvidia.com/gpu: 0` in limits and requests alike) asks for no device:
    it is no offence in a dra-only namespace and no claim, so it is left out, as the workload
    scan leaves it out (`app/workloads/scan.py`). With `zeros` (by default, the matcher's
    `keeps_zeros`), it is kept: translation removes it from the container, claiming nothing.
    """
    if zeros is None:
        zeros = is_legacy.keeps_zeros
    found: list[LegacyRequest] = []
    for ref in containers(spec):
        limits = resource_map(ref, "limits")
        requests = resource_map(ref, "requests")
        if not limits and not requests:
            continue
        names = [n for n in limits if is_legacy(n)]
        names += [n for n in requests if n not in limits and is_legacy(n)]
        for name in names:
            limit, request = limits.get(name), requests.get(name)
            if zeros or not (is_zero(limit) and is_zero(request)):
                found.append(LegacyRequest(ref, name, limit, request))
    return found


def may_ask_legacy(spec: PodSpecRef, is_legacy: LegacyMatcher) -> bool:
    """False when no container of `spec` names a legacy resource, zero or not: what
    `legacy_requests(spec, is_legacy, zeros=True)` being empty says, read from the containers as
    decoded without making a LegacyRequest per name; True when one may, or when a container could
    not be read (`legacy_requests` raises with its path)."""
    if spec.error is not None:
        return True
    for ref in spec.read:
        if ref.error is not None:
            return True
        for name in ref.limits:
            if is_legacy(name):
                return True
        for name in ref.requests:
            if is_legacy(name):
                return True
    return False


def offence_keys(requests: list[LegacyRequest]) -> frozenset[tuple[str, str, str]]:
    """(container field, container name, resource) of each request, to compare old and new."""
    return frozenset((r.container.field, r.container.name, r.resource) for r in requests)
