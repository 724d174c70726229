"""Finding legacy extended-resource requests, and mapping them to DRA device requests.

Shared by dra-only enforcement (which names the fix) and translation (which applies it).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from app.cluster.view import ClusterView
from app.config.policy import LegacyResources, Mapping
from app.k8s.objects import ContainerRef, PodSpecRef, containers, resource_map

IMPLICIT_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
"""Extended resources of this form name their DeviceClass directly (KEP-5004)."""


class LegacyMatcher:
    """Decides whether a resource name is a legacy (device-plugin) extended resource."""

    def __init__(self, config: LegacyResources) -> None:
        self._exact = frozenset(n for n in config.names if not _is_glob(n))
        globs = [fnmatch.translate(n) for n in config.names if _is_glob(n)]
        self._pattern = re.compile("|".join(globs)) if globs else None
        self._seen: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        known = self._seen.get(name)
        if known is None:
            known = name in self._exact or bool(self._pattern and self._pattern.match(name))
            if len(self._seen) < 4096:  # names come from users: bound the memo
                self._seen[name] = known
        return known


def _is_glob(name: str) -> bool:
    return any(ch in name for ch in "*?[")


@dataclass(frozen=True, slots=True)
class DeviceMapping:
    """The DRA request a legacy name becomes: a DeviceClass plus CEL selectors."""

    device_class_name: str
    selectors: tuple[str, ...] = ()
    source: str = "config"
    """Where the mapping came from: config, deviceclass (extendedResourceName) or implicit."""


class MappingResolver:
    """Legacy name -> DeviceMapping: config rules first, then DeviceClasses, then implicit names."""

    def __init__(self, rules: tuple[Mapping, ...]) -> None:
        self._rules = [
            (rule, re.compile(rule.resource) if rule.pattern else None) for rule in rules
        ]
        self._memo: dict[str, DeviceMapping | None] = {}

    def _from_config(self, resource: str) -> DeviceMapping | None:
        if resource in self._memo:
            return self._memo[resource]
        found: DeviceMapping | None = None
        for rule, regex in self._rules:
            if regex is None:
                if rule.resource == resource:
                    found = DeviceMapping(rule.device_class_name, rule.selectors)
                    break
                continue
            match = regex.fullmatch(resource)
            if match:
                found = DeviceMapping(
                    _expand(rule.device_class_name, match),
                    tuple(_expand(s, match) for s in rule.selectors),
                )
                break
        if len(self._memo) < 4096:
            self._memo[resource] = found
        return found

    def resolve(self, resource: str, view: ClusterView) -> DeviceMapping | None:
        found = self._from_config(resource)
        if found is not None:
            return found
        device_class = view.device_class_for_extended_resource(resource)
        if device_class is not None:
            return DeviceMapping(device_class, (), "deviceclass")
        if resource.startswith(IMPLICIT_CLASS_PREFIX):
            return DeviceMapping(resource.removeprefix(IMPLICIT_CLASS_PREFIX), (), "implicit")
        return None

    @staticmethod
    def missing_hint(resource: str) -> str:
        """What makes `resource` resolvable: the policy key to add, or a DeviceClass field."""
        return (
            f"add `mappings: [{{resource: {resource}, deviceClassName: <class>}}]` to the "
            f"dra-webhook policy, or set `spec.extendedResourceName: {resource}` on the "
            "DeviceClass that serves it"
        )


_GROUP_REF = re.compile(r"\$(\d+)")


def _expand(template: str, match: re.Match[str]) -> str:
    return _GROUP_REF.sub(lambda m: match.group(int(m.group(1))) or "", template)


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


def legacy_requests(spec: PodSpecRef, is_legacy: LegacyMatcher) -> list[LegacyRequest]:
    """Every (container, legacy resource) pair in a pod spec, in container order."""
    found: list[LegacyRequest] = []
    for ref in containers(spec):
        limits = resource_map(ref, "limits")
        requests = resource_map(ref, "requests")
        if not limits and not requests:
            continue
        names = [n for n in limits if is_legacy(n)]
        names += [n for n in requests if n not in limits and is_legacy(n)]
        for name in names:
            found.append(LegacyRequest(ref, name, limits.get(name), requests.get(name)))
    return found


def offence_keys(requests: list[LegacyRequest]) -> frozenset[tuple[str, str, str]]:
    """(container field, container name, resource) of each request, to compare old and new."""
    return frozenset((r.container.field, r.container.name, r.resource) for r in requests)
