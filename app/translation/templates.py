"""The ResourceClaimTemplates translation references: one per shape, named by its content.

A shape is (namespace, DeviceClass, selectors, capacity requests, count). Its template is built
once, run through the template hooks (DeviceClass defaults plug in here), and named from a hash
of the finished
claim spec, so the same shape always gives the same template, replicas of the webhook agree on
it without talking to each other, and a changed default gives a new template instead of silently
reusing a stale one.

`migrate` writes templates into Git, where people read and review them: its builder
(`TemplateBuilder.readable()`) names a shape by what it asks for (`dra-gpu-nvidia-com-2`,
`dra-mig-nvidia-com-1g-10gb-1`) and adds the content hash only when two different shapes would
get the same name in a namespace. Those templates carry no managed-by label: Git owns them, so
the webhook's template garbage collection must never delete them, nor translation treat the
entries that use them as its own.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.bounded import BoundedCache, CacheName
from app.k8s.templates import MANAGED_BY, MANAGED_BY_LABEL, TEMPLATE_LABEL
from app.translation.legacy import DeviceMapping
from app.translation.sharing import SHAREABLE

Obj = dict[str, Any]

API_VERSION = "resource.k8s.io/v1"
MAX_NAME = 63
HASH_CHARS = 10

TemplateHook = Callable[[Obj, str], Obj]
"""(ResourceClaimSpec, namespace) -> ResourceClaimSpec, run on each new shape before it is named.

A hook returns a new dict (it must not change its argument) and depends only on its arguments
and the policy it was built from: its result is memoized per shape.
"""

_NOT_DNS = re.compile(r"[^a-z0-9]+")
_COMPARED_LITERAL = re.compile(r'==\s*"([^"\\]*)"')
"""A string literal a selector compares with (the profile in `...profile == "1g.10gb"`)."""
_MEMO_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class ClaimTemplate:
    """A ResourceClaimTemplate translation needs, and what it asks for."""

    name: str
    device_class: str
    count: int
    template: Obj
    """The whole object, ready to create. Shared between requests: never mutate it."""


class TemplateBuilder:
    """Builds, names and memoizes the template of each shape; compiled once per policy."""

    def __init__(
        self, name_prefix: str, hooks: tuple[TemplateHook, ...] = (), *, readable: bool = False
    ) -> None:
        self._prefix = name_prefix
        self._hooks = hooks
        self._readable = readable
        self._memo: BoundedCache[
            tuple[str, str, tuple[str, ...], tuple[tuple[str, str], ...], int], ClaimTemplate
        ] = BoundedCache(CacheName.TEMPLATE_SHAPES, _MEMO_LIMIT)
        self._taken: dict[tuple[str, str], Obj] = {}
        """(namespace, name) -> claim spec, for readable names: a name is given to one shape."""
        self._own_name = re.compile(
            rf"^{re.escape(name_prefix)}-[a-z0-9-]+-[0-9]+-[0-9a-f]{{{HASH_CHARS}}}$"
        )

    def readable(self) -> TemplateBuilder:
        """A builder with the same prefix and hooks whose names are for people (see above)."""
        return TemplateBuilder(self._prefix, self._hooks, readable=True)

    def reserve(self, namespace: str, name: str, spec: Obj) -> None:
        """A readable name already in use (a template found next to the manifests) for `spec`:
        a shape with another spec does not get it."""
        self._taken.setdefault((namespace, name), spec)

    def is_own_name(self, name: str) -> bool:
        """Whether `name` is shaped like the names this builder gives."""
        return len(name) <= MAX_NAME and self._own_name.match(name) is not None

    def get(self, namespace: str, mapping: DeviceMapping, count: int) -> ClaimTemplate:
        key = (namespace, mapping.device_class_name, mapping.selectors, mapping.capacity, count)
        found = self._memo.get(key)
        if found is None:
            # shapes come from users: the memo is bounded
            found = self._memo.put(key, self._build(namespace, mapping, count))
        return found

    def adds_to(self, mapping: DeviceMapping, count: int) -> bool:
        """Whether the hooks (DeviceClass defaults) add to the claim of this shape, so that its
        template asks for more than `claim_spec` says (app.translation.leave)."""
        if not self._hooks:
            return False
        plain = claim_spec(mapping, count)
        spec = plain
        for hook in self._hooks:
            spec = hook(spec, "")
        return spec != plain

    def _build(self, namespace: str, mapping: DeviceMapping, count: int) -> ClaimTemplate:
        spec = claim_spec(mapping, count)
        for hook in self._hooks:
            spec = hook(spec, namespace)
        name = template_name(self._prefix, mapping.device_class_name, count, spec)
        if self._readable:
            return self._readable_template(namespace, mapping, count, spec, name)
        template: Obj = {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaimTemplate",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            },
            # copied by the resource claim controller onto the claims it makes: they say the
            # template is in use (app.cluster.templates)
            "spec": {"metadata": {"labels": {TEMPLATE_LABEL: name}}, "spec": spec},
        }
        return ClaimTemplate(name, mapping.device_class_name, count, template)

    def _readable_template(
        self, namespace: str, mapping: DeviceMapping, count: int, spec: Obj, hashed: str
    ) -> ClaimTemplate:
        name = readable_name(self._prefix, mapping, count)
        taken = self._taken.get((namespace, name))
        if name == "" or (taken is not None and taken != spec):
            name = hashed  # two shapes, one readable name: the content tells them apart
        self._taken.setdefault((namespace, name), spec)
        metadata: Obj = {"name": name}
        if namespace:
            metadata["namespace"] = namespace
        template: Obj = {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaimTemplate",
            "metadata": metadata,
            "spec": {"spec": spec},
        }
        return ClaimTemplate(name, mapping.device_class_name, count, template)


def readable_name(prefix: str, mapping: DeviceMapping, count: int) -> str:
    """<prefix>-<class slug>[-<what the selectors compare with>][-<capacity amounts>]-<count>,
    or "" for selectors that compare with no string literal (nothing readable tells such shapes
    apart) other than the one every share carries."""
    selectors = [s for s in mapping.selectors if s != SHAREABLE]
    words = [w for s in selectors for w in _COMPARED_LITERAL.findall(s)]
    if selectors and not words:
        return ""
    words += [f"{name.rsplit('/', 1)[-1]}-{amount}" for name, amount in mapping.capacity]
    room = MAX_NAME - len(prefix) - len(str(count)) - 2
    middle = slug("-".join([mapping.device_class_name, *words]), room) or "class"
    return f"{prefix}-{middle}-{count}"


def claim_spec(mapping: DeviceMapping, count: int) -> Obj:
    """The ResourceClaimSpec asking for `count` devices of the mapping's class and selectors
    (for a share, each with the mapping's `capacity.requests`)."""
    exactly: Obj = {
        "deviceClassName": mapping.device_class_name,
        "allocationMode": "ExactCount",
        "count": count,
    }
    if mapping.selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in mapping.selectors]
    if mapping.capacity:
        exactly["capacity"] = {"requests": dict(mapping.capacity)}
    return {
        "devices": {
            "requests": [{"name": request_name(mapping.device_class_name), "exactly": exactly}]
        }
    }


def request_name(device_class: str) -> str:
    """The claim's request name: the class's first label (gpu for gpu.nvidia.com)."""
    label = slug(device_class.split(".", 1)[0], MAX_NAME)
    return label or "devices"


def template_name(prefix: str, device_class: str, count: int, spec: Obj) -> str:
    """<prefix>-<class slug>-<count>-<hash of the claim spec>: a DNS label of <= 63 characters."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:HASH_CHARS]
    room = MAX_NAME - len(prefix) - len(str(count)) - HASH_CHARS - 3
    middle = slug(device_class, room) or "class"
    return f"{prefix}-{middle}-{count}-{digest}"


def slug(text: str, limit: int) -> str:
    """Lower-case letters, digits and single dashes, at most `limit` characters, no edge dash."""
    return _NOT_DNS.sub("-", text.lower()).strip("-")[: max(limit, 0)].rstrip("-")
