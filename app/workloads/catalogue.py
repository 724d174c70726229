"""The catalogue of workload kinds: where each keeps its pod specs, how many pods each makes,
and the operator's own GPU fields, read from data (`catalogue.yaml`, plus the policy's
`workloadKinds:`), in the spirit of Gatekeeper's ExpansionTemplate.

Every reader of pod specs goes through `Catalogue.templates`: dra-only, translation, quota
foresight, exceptions, `check`, `migrate` and `report` treat a PyTorchJob's roles or a
RayCluster's worker groups as they treat a Deployment's template. A path is dotted field
names where `*` stands for every value of a map and `[]` for every item of a list; the pods of
a template are a product of factors whose wildcards bind to the same items as the template's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, NamedTuple

import yaml

from app.errors import ObjectShapeError, PolicyError
from app.k8s.objects import PodSpecRef
from app.k8s.patch import escape

Obj = dict[str, Any]
GroupKind = tuple[str, str]

_MAP = "*"
_LIST = "[]"
MAX_EMBEDDED_DEPTH = 4
"""Objects inside objects (an AppWrapper's components) are followed this deep."""


@dataclass(frozen=True, slots=True)
class Path:
    """A parsed catalogue path: field names, `*` (map values) and `[]` (list items)."""

    text: str
    steps: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Path:
        steps: list[str] = []
        for part in text.split("."):
            name, lists = part, 0
            while name.endswith(_LIST):
                name, lists = name[: -len(_LIST)], lists + 1
            if not name and not lists:
                raise ValueError(f"{text!r}: empty field name")
            if name:
                steps.append(name)
            steps += [_LIST] * lists
        if not steps or steps[0] in (_MAP, _LIST):
            raise ValueError(f"{text!r}: must start with a field name")
        return cls(text, tuple(steps))

    @property
    def wildcards(self) -> int:
        return sum(1 for s in self.steps if s in (_MAP, _LIST))

    @property
    def pointer(self) -> str:
        """The JSON pointer of a path without wildcards."""
        return "".join(f"/{escape(step)}" for step in self.steps)


@dataclass(frozen=True, slots=True)
class Match:
    """One place a path reached in an object."""

    value: Any
    parts: tuple[str | int, ...]
    """The concrete keys and indexes walked."""
    bindings: tuple[str | int, ...]
    """What each wildcard stood for, in order."""
    parent: Any

    @property
    def path(self) -> str:
        return dotted(self.parts)

    @property
    def pointer(self) -> str:
        return "".join(f"/{escape(str(p))}" for p in self.parts)


def dotted(parts: Iterable[str | int]) -> str:
    """Field path for messages: `spec.workerGroupSpecs[0].template`, `metadata.labels[a/b]`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.replace("-", "").replace("_", "").isalnum() and part:
            out += f".{part}" if out else part
        else:
            out += f"[{part}]"
    return out


def walk(obj: Any, path: Path, prefix: tuple[str | int, ...] = ()) -> Iterator[Match]:
    """Every value `path` reaches in `obj` (absent fields reach nothing). A field of the wrong
    type on the way raises ObjectShapeError with its path."""
    yield from _walk(obj, path.steps, prefix, (), None)


def _walk(
    node: Any,
    steps: tuple[str, ...],
    parts: tuple[str | int, ...],
    bindings: tuple[str | int, ...],
    parent: Any,
) -> Iterator[Match]:
    if not steps:
        yield Match(node, parts, bindings, parent)
        return
    step, rest = steps[0], steps[1:]
    if step == _LIST:
        if not isinstance(node, list):
            raise ObjectShapeError(dotted(parts), "must be a list")
        for index, item in enumerate(node):
            if item is not None:
                yield from _walk(item, rest, (*parts, index), (*bindings, index), node)
        return
    if not isinstance(node, dict):
        raise ObjectShapeError(dotted(parts), "must be an object")
    if step == _MAP:
        for key, item in node.items():
            if item is not None:
                yield from _walk(item, rest, (*parts, key), (*bindings, key), node)
        return
    child = node.get(step)
    if child is not None:
        yield from _walk(child, rest, (*parts, step), bindings, node)


def _bound(obj: Any, path: Path, bindings: tuple[str | int, ...]) -> tuple[Any, list[str | int]]:
    """The value at `path` with its wildcards taken from `bindings` (None when absent), and the
    keys walked (for the field path of an error)."""
    node, parts, used = obj, [], 0
    for step in path.steps:
        if step in (_MAP, _LIST):
            key: str | int = bindings[used] if used < len(bindings) else 0
            used += 1
        else:
            key = step
        parts.append(key)
        if isinstance(node, dict) and isinstance(key, str):
            node = node.get(key)
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return None, parts
        if node is None:
            return None, parts
    return node, parts


@dataclass(frozen=True, slots=True)
class Factor:
    """One factor of a template's pod count: the first of `paths` present, else `default`;
    one less when `less_one_if` is present (a LeaderWorkerSet's group counts its leader)."""

    paths: tuple[Path, ...]
    default: int = 1
    less_one_if: Path | None = None

    def value(self, obj: Obj, bindings: tuple[str | int, ...], prefix: str) -> int:
        found = self.default
        for path in self.paths:
            raw, where = _bound(obj, path, bindings)
            if raw is None:
                continue
            if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
                raise ObjectShapeError(prefix + dotted(where), "must be a non-negative integer")
            found = raw
            break
        if self.less_one_if is not None and _bound(obj, self.less_one_if, bindings)[0] is not None:
            found = max(found - 1, 0)
        return found


@dataclass(frozen=True, slots=True)
class SpecSite:
    """Where a kind keeps one pod spec."""

    path: Path
    pods: tuple[Factor, ...] | None
    """Factors of how many pods of it run at once; None: not counted (a blueprint)."""
    per_node: bool = False
    """One pod per node (a DaemonSet)."""
    pointer: str = ""
    """The JSON pointer of a path without wildcards."""


@dataclass(frozen=True, slots=True)
class OperatorField:
    """An operator's own GPU field: reported, never rewritten."""

    path: Path
    form: str
    """`resources` (name -> amount, as limits) or `nameQuantity` ({name, quantity})."""
    why: str
    name_key: str = "name"
    quantity_key: str = "quantity"
    """Where a `nameQuantity` field keeps the resource name and the amount."""


@dataclass(frozen=True, slots=True)
class Reported:
    """A part of the object where a GPU request can sit but no claim can be written."""

    path: Path
    why: str


@dataclass(frozen=True, slots=True)
class Entry:
    group: str
    kind: str
    source: str
    specs: tuple[SpecSite, ...] = ()
    embedded: tuple[Path, ...] = ()
    fields: tuple[OperatorField, ...] = ()
    reports: tuple[Reported, ...] = ()

    simple: SpecSite | None = field(default=None, init=False, compare=False, repr=False)
    """The one pod spec site of an entry that has only that, at a path without wildcards."""

    def __post_init__(self) -> None:
        if len(self.specs) == 1 and not self.embedded and not self.specs[0].path.wildcards:
            object.__setattr__(self, "simple", self.specs[0])

    @property
    def built_in(self) -> bool:
        """A core kind: its schema is closed, so its GPU requests can only be in containers."""
        return self.group in ("", "apps", "batch")


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
                ref = PodSpecRef(match.value, match.path, match.pointer, meta)
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
    ref = PodSpecRef(node, site.path.text, site.pointer, meta if isinstance(meta, dict) else {})
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


# -- loading ---------------------------------------------------------------------------------


def parse_entries(raw: Any, where: str) -> tuple[Entry, ...]:
    """Entries from the catalogue's data (a list of maps); PolicyError names the bad key."""
    if not isinstance(raw, list):
        raise PolicyError(f"{where}: must be a list")
    return tuple(_entry(item, f"{where}[{i}]") for i, item in enumerate(raw))


_ENTRY_KEYS = {"group", "kind", "source", "podSpecs", "embedded", "fields", "reports"}


def _entry(raw: Any, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise PolicyError(f"{where}: must be a map")
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise PolicyError(
            f"{where}.{sorted(unknown)[0]}: unknown key; keys are {', '.join(sorted(_ENTRY_KEYS))}"
        )
    group, kind = raw.get("group", ""), raw.get("kind")
    if not isinstance(group, str):
        raise PolicyError(f"{where}.group: must be a string")
    if not isinstance(kind, str) or not kind:
        raise PolicyError(f"{where}.kind: must be a kind name")
    return Entry(
        group,
        kind,
        str(raw.get("source", "")),
        specs=tuple(
            _site(s, f"{where}.podSpecs[{i}]") for i, s in enumerate(_list(raw, "podSpecs", where))
        ),
        embedded=tuple(
            _path(p, f"{where}.embedded[{i}]") for i, p in enumerate(_list(raw, "embedded", where))
        ),
        fields=tuple(
            _field(f, f"{where}.fields[{i}]") for i, f in enumerate(_list(raw, "fields", where))
        ),
        reports=tuple(
            _reported(r, f"{where}.reports[{i}]")
            for i, r in enumerate(_list(raw, "reports", where))
        ),
    )


def _list(raw: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise PolicyError(f"{where}.{key}: must be a list")
    return value


def _path(raw: Any, where: str) -> Path:
    if not isinstance(raw, str):
        raise PolicyError(f"{where}: must be a path string")
    try:
        return Path.parse(raw)
    except ValueError as exc:
        raise PolicyError(f"{where}: {exc}") from None


def _site(raw: Any, where: str) -> SpecSite:
    if not isinstance(raw, dict) or "path" not in raw:
        raise PolicyError(f"{where}: must be a map with a path")
    unknown = set(raw) - {"path", "pods", "perNode"}
    if unknown:
        raise PolicyError(
            f"{where}.{sorted(unknown)[0]}: unknown key; keys are path, pods, perNode"
        )
    path = _path(raw["path"], f"{where}.path")
    pods = raw.get("pods")
    factors: tuple[Factor, ...] | None = None
    if pods is not None:
        if not isinstance(pods, list):
            raise PolicyError(f"{where}.pods: must be a list")
        factors = tuple(_factor(f, f"{where}.pods[{i}]", path) for i, f in enumerate(pods))
    pointer = path.pointer if not path.wildcards else ""
    return SpecSite(path, factors, per_node=raw.get("perNode") is True, pointer=pointer)


def _factor(raw: Any, where: str, site: Path) -> Factor:
    if isinstance(raw, str):
        raw = {"paths": [raw]}
    if not isinstance(raw, dict):
        raise PolicyError(f"{where}: must be a path or a map with paths")
    unknown = set(raw) - {"paths", "default", "lessOneIf"}
    if unknown:
        raise PolicyError(
            f"{where}.{sorted(unknown)[0]}: unknown key; keys are paths, default, lessOneIf"
        )
    paths = tuple(_path(p, f"{where}.paths[{i}]") for i, p in enumerate(_list(raw, "paths", where)))
    for i, path in enumerate(paths):
        if path.wildcards > site.wildcards:
            raise PolicyError(
                f"{where}.paths[{i}]: has more wildcards than the pod spec's path {site.text}"
            )
    default = raw.get("default", 1)
    if not isinstance(default, int) or isinstance(default, bool) or default < 0:
        raise PolicyError(f"{where}.default: must be a non-negative integer")
    less = raw.get("lessOneIf")
    return Factor(paths, default, None if less is None else _path(less, f"{where}.lessOneIf"))


def _field(raw: Any, where: str) -> OperatorField:
    if not isinstance(raw, dict):
        raise PolicyError(f"{where}: must be a map")
    unknown = set(raw) - {"path", "form", "why", "nameKey", "quantityKey"}
    if unknown:
        raise PolicyError(
            f"{where}.{sorted(unknown)[0]}: unknown key; keys are path, form, why, nameKey, "
            "quantityKey"
        )
    form = raw.get("form", "resources")
    if form not in ("resources", "nameQuantity"):
        raise PolicyError(f"{where}.form: must be resources or nameQuantity")
    keys = [raw.get("nameKey", "name"), raw.get("quantityKey", "quantity")]
    if not all(isinstance(k, str) and k for k in keys):
        raise PolicyError(f"{where}: nameKey and quantityKey must be field names")
    return OperatorField(
        _path(raw.get("path"), f"{where}.path"), form, _why(raw, where), keys[0], keys[1]
    )


def _reported(raw: Any, where: str) -> Reported:
    if not isinstance(raw, dict):
        raise PolicyError(f"{where}: must be a map")
    return Reported(_path(raw.get("path"), f"{where}.path"), _why(raw, where))


def _why(raw: Mapping[str, Any], where: str) -> str:
    why = raw.get("why")
    if not isinstance(why, str) or not why.strip():
        raise PolicyError(f"{where}.why: must say why (a sentence)")
    return " ".join(why.split())


@functools.cache
def builtin() -> Catalogue:
    """The catalogue shipped in `catalogue.yaml` (read once)."""
    text = resources.files(__package__).joinpath("catalogue.yaml").read_text()
    data = yaml.safe_load(text)
    return Catalogue(parse_entries(data.get("kinds"), "catalogue.yaml: kinds"))
