"""Catalogue paths: dotted field names where `*` stands for every value of a map and `[]` for
every item of a list; walking one through an object, and the field paths messages print."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from app.errors import ObjectShapeError
from app.k8s.patch import escape

__all__ = ["Match", "Path", "bound", "dotted", "walk"]

_MAP = "*"
_LIST = "[]"


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


def bound(obj: Any, path: Path, bindings: tuple[str | int, ...]) -> tuple[Any, list[str | int]]:
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
