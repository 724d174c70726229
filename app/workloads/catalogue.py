"""The catalogue of workload kinds: where each keeps its pod specs, how many pods each makes,
and the operator's own GPU fields, read from data (`catalogue.yaml`, plus the policy's
`workloadKinds:`; :mod:`app.workloads.entries`), in the spirit of Gatekeeper's ExpansionTemplate.

Every reader of pod specs goes through `Catalogue.templates`: dra-only, translation, quota
foresight, exceptions, `check`, `migrate` and `report` treat a PyTorchJob's roles or a
RayCluster's worker groups as they treat a Deployment's template. A path
(:mod:`app.workloads.paths`) is dotted field names with wildcards; the pods of a template are a
product of factors whose wildcards bind to the same items as the template's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from typing import Any, NamedTuple

import yaml

from app.errors import ObjectShapeError
from app.k8s.objects import PodSpecRef
from app.workloads.entries import Entry, SpecSite, parse_entries
from app.workloads.paths import Match, Path, dotted, walk

Obj = dict[str, Any]
GroupKind = tuple[str, str]

MAX_EMBEDDED_DEPTH = 4
"""Objects inside objects (an AppWrapper's components) are followed this deep."""


class Template(NamedTuple):
    """One pod spec of an object, with how many pods of it run at once (a named tuple: one is
    made per template on every admission)."""

    spec: PodSpecRef
    pods: int | None
    """None: not counted (a runtime blueprint, or per node)."""
    per_node: bool = False
    kind: str = ""
    """The kind whose entry found it (an AppWrapper's component: the component's kind)."""
    parts: tuple[str | int, ...] = ()
    """Where the pod spec is, as keys and indexes."""


class Catalogue:
    """Workload kinds by (group, kind)."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self._entries: dict[GroupKind, Entry] = {}
        for entry in entries:
            self._entries[(entry.group, entry.kind)] = entry

    def __contains__(self, group_kind: object) -> bool:
        return group_kind in self._entries

    def entry(self, group: str, kind: str) -> Entry | None:
        return self._entries.get((group, kind))

    def kinds(self) -> frozenset[GroupKind]:
        return frozenset(self._entries)

    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries.values())

    def extended(self, entries: Iterable[Entry]) -> Catalogue:
        """This catalogue with `entries` added (replacing an entry of the same group/kind)."""
        return Catalogue((*self._entries.values(), *entries))

    def templates(self, group: str, kind: str, obj: Obj) -> tuple[Template, ...]:
        """Every pod spec of `obj` (of group/kind), in catalogue order; () for other kinds."""
        entry = self._entries.get((group, kind))
        if entry is None:
            return ()
        if entry.simple is not None:  # every built-in kind: one chain of fields
            fixed = _fixed(obj, entry.simple, kind)
            return () if fixed is None else (fixed,)
        return tuple(self._templates(entry, obj, (), 0))

    def specs(self, group: str, kind: str, obj: Obj) -> tuple[PodSpecRef, ...]:
        return tuple(t.spec for t in self.templates(group, kind, obj))

    def _templates(
        self, entry: Entry, obj: Obj, prefix: tuple[str | int, ...], depth: int
    ) -> Iterator[Template]:
        head = dotted(prefix) + "." if prefix else ""
        for site in entry.specs:
            if not prefix and not site.path.wildcards:
                # every built-in kind: a chain of fields, read without the general walk (this
                # runs on every pod admission)
                fixed = _fixed(obj, site, entry.kind)
                if fixed is not None:
                    yield fixed
                continue
            for match in walk(obj, site.path, prefix):
                if not isinstance(match.value, dict):
                    raise ObjectShapeError(match.path, "must be an object")
                pods: int | None = None
                if site.pods is not None:
                    pods = 1
                    for factor in site.pods:
                        pods *= factor.value(obj, match.bindings, head)
                meta = _meta(match, site.path, obj)
                ref = PodSpecRef.of(match.value, match.path, match.pointer, meta)
                yield Template(ref, pods, site.per_node, entry.kind, match.parts)
        if depth >= MAX_EMBEDDED_DEPTH:
            return
        for path in entry.embedded:
            for match in walk(obj, path, prefix):
                inner = match.value
                if not isinstance(inner, dict):
                    continue
                group, kind = group_kind(inner)
                found = self._entries.get((group, kind))
                if found is not None:
                    yield from self._templates(found, inner, match.parts, depth + 1)

    def embedded(self, group: str, kind: str, obj: Obj) -> Iterator[tuple[str, Obj]]:
        """(path, object) of every object the entry embeds, at any depth (AppWrapper)."""
        entry = self._entries.get((group, kind))
        if entry is None:
            return
        for path in entry.embedded:
            for match in walk(obj, path):
                if isinstance(match.value, dict):
                    yield match.path, match.value


def _fixed(obj: Obj, site: SpecSite, kind: str) -> Template | None:
    """The template at a path without wildcards (what `walk` finds there, faster)."""
    steps = site.path.steps
    node: Any = obj
    parent: Any = None
    for depth, step in enumerate(steps):
        if not isinstance(node, dict):
            raise ObjectShapeError(".".join(steps[:depth]), "must be an object")
        parent, node = node, node.get(step)
        if node is None:
            return None
    if not isinstance(node, dict):
        raise ObjectShapeError(site.path.text, "must be an object")
    pods: int | None = None
    if site.pods is not None:
        pods = 1
        for factor in site.pods:
            pods *= factor.value(obj, (), "")
    meta = parent.get("metadata") if parent is not obj else obj.get("metadata")
    if steps[-1] != "spec":
        meta = obj.get("metadata")
    ref = PodSpecRef.of(node, site.path.text, site.pointer, meta if isinstance(meta, dict) else {})
    return Template(ref, pods, site.per_node, kind, steps)


def _meta(match: Match, path: Path, obj: Obj) -> Mapping[str, Any]:
    """The metadata of the pods a spec makes: a template's (the spec's parent's `metadata`), or
    for a Pod and a pod spec written inline in the object (KServe), the object's own."""
    parent = match.parent
    if path.steps[-1] == "spec" and isinstance(parent, dict) and parent is not obj:
        meta = parent.get("metadata")
        return meta if isinstance(meta, dict) else {}
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def group_kind(obj: Mapping[str, Any]) -> GroupKind:
    """(group, kind) of an object from its apiVersion and kind ("" for what is not a string)."""
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
    return group, kind if isinstance(kind, str) else ""


@functools.cache
def builtin() -> Catalogue:
    """The catalogue shipped in `catalogue.yaml` (read once)."""
    text = resources.files(__package__).joinpath("catalogue.yaml").read_text()
    data = yaml.safe_load(text)
    return Catalogue(parse_entries(data.get("kinds"), "catalogue.yaml: kinds"))
