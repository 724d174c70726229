"""What the catalogue says of one workload kind (its pod spec sites, pod-count factors, operator
GPU fields and places to report), and reading it from data with a PolicyError naming the key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.errors import ObjectShapeError, PolicyError
from app.workloads.paths import Path, bound, dotted

Obj = dict[str, Any]

__all__ = ["Entry", "Factor", "OperatorField", "Reported", "SpecSite", "parse_entries"]


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
            raw, where = bound(obj, path, bindings)
            if raw is None:
                continue
            if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
                raise ObjectShapeError(prefix + dotted(where), "must be a non-negative integer")
            found = raw
            break
        if self.less_one_if is not None and bound(obj, self.less_one_if, bindings)[0] is not None:
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
