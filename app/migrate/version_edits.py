"""The edits a version upgrade makes to a manifest, and making them.

Four moves (`SetValue`, `Wrap`, `Lift`, `Drop`), planned by :mod:`app.migrate.versions`, made
either on the plain object (`apply`: what it must become) or on the round-trip YAML tree
(`apply_tree`: the nodes themselves move, with the comments ruamel keeps on them, re-indented
when a block moves under a new key).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import ScalarString

from app.migrate.edit import drop, put_lines_before

Obj = dict[str, Any]
Key = str | int
Where = tuple[Key, ...]

__all__ = ["Drop", "Edit", "Lift", "SetValue", "Wrap", "apply", "apply_tree", "walk"]


# -- edits ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SetValue:
    """`at[key] = value` (a scalar: the apiVersion)."""

    at: Where
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class Wrap:
    """Move `keys` of the map `at` into a new map `into`, placed where the first of them was."""

    at: Where
    keys: tuple[str, ...]
    into: str


@dataclass(frozen=True, slots=True)
class Lift:
    """Replace the key `key` of the map `at` by the keys of its map value, in place."""

    at: Where
    key: str


@dataclass(frozen=True, slots=True)
class Drop:
    """Leave `key` of the map `at` out."""

    at: Where
    key: str


Edit = SetValue | Wrap | Lift | Drop


def apply(obj: Obj, edits: list[Edit]) -> Obj:
    """A copy of the plain object `obj` with the edits made."""
    out = copy.deepcopy(obj)
    for edit in edits:
        _apply(out, edit, 0)
    return out


def apply_tree(root: Any, edits: list[Edit], indent: int = 2) -> None:
    """Make the edits in a round-trip YAML tree, moving its nodes (and their comments).

    `indent`: the document's mapping indent, how far right a field moved under `exactly` goes;
    the comments inside a moved block go with it, so they stay aligned with its keys. An edit
    whose place is not there any more (a node shared through an anchor was already changed
    through another path) is skipped; the caller compares the result with `apply`'s.
    """
    for edit in edits:
        _apply(root, edit, indent)


def walk(obj: Any, at: Where) -> Any:
    node = obj
    for key in at:
        if isinstance(key, int):
            node = node[key] if isinstance(node, list) and 0 <= key < len(node) else None
        else:
            node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            return None
    return node


# -- making the edits ------------------------------------------------------------------------


def _apply(root: Any, edit: Edit, indent: int) -> None:
    parent = walk(root, edit.at) if edit.at else root
    if not isinstance(parent, dict):
        return
    if isinstance(edit, SetValue):
        old = parent.get(edit.key)
        parent[edit.key] = type(old)(edit.value) if isinstance(old, ScalarString) else edit.value
        if isinstance(old, str) and isinstance(parent, CommentedMap):
            _shift_line_comment(parent, edit.key, len(edit.value) - len(old))
    elif isinstance(edit, Wrap):
        _wrap(parent, edit, indent)
    elif isinstance(edit, Lift):
        _lift(parent, edit.key)
    elif isinstance(parent, CommentedMap):
        drop(parent, edit.key)
    else:
        parent.pop(edit.key, None)


def _wrap(parent: dict[Any, Any], edit: Wrap, indent: int) -> None:
    keys = [key for key in parent if key in edit.keys]
    if not keys or edit.into in parent:
        return
    at = list(parent).index(keys[0])
    column = _column(parent, keys[0])
    inner: dict[Any, Any] = CommentedMap() if isinstance(parent, CommentedMap) else {}
    for key in keys:
        inner[key] = parent[key]
        _move_comment(parent, inner, key)
        del parent[key]
    _insert(parent, at, edit.into, inner)
    if column is not None:
        _shift(inner, indent, column)


def _lift(parent: dict[Any, Any], key: str) -> None:
    inner = parent.get(key)
    if not isinstance(inner, dict):
        return
    at = list(parent).index(key)
    outer, column = _column(parent, key), _column(inner, next(iter(inner), None))
    eol, above = _lifted_comments(parent, key, inner)
    del parent[key]
    if outer is not None and column is not None:
        _shift(inner, outer - column, column)
    for offset, name in enumerate(list(inner)):
        _insert(parent, at + offset, name, inner[name])
        _move_comment(inner, parent, name)
    if not inner or not isinstance(parent, CommentedMap):
        return
    first = next(iter(inner))
    entry = parent.ca.items.setdefault(first, [None, None, None, None])
    while len(entry) < 3:
        entry.append(None)
    if eol is not None and entry[2] is None:
        entry[2] = eol
        eol = None
    lines = "".join(f"{' ' * (outer or 0)}# {text}\n" for text in above)
    texts = _texts(eol) + ([] if put_lines_before(parent, first, lines) else above)
    if texts and entry[2] is None and not isinstance(parent[first], dict | list):
        parent.yaml_add_eol_comment("# " + "; ".join(texts), first)


def _lifted_comments(parent: Any, key: str, inner: Any) -> tuple[Any, list[str]]:
    """The end-of-line comment token of `key:` (None when it has none), and the texts of the
    comment lines above the first key of its value (which has no line of its own any more)."""
    eol = None
    if isinstance(parent, CommentedMap):
        entry = parent.ca.items.pop(key, None) or []
        token = entry[2] if len(entry) > 2 else None
        if token is not None and str(token.value).startswith("#"):
            eol = token
    above: list[str] = []
    if isinstance(inner, CommentedMap) and inner.ca.comment and len(inner.ca.comment) > 1:
        for token in _tokens([inner.ca.comment[1]]):
            above += _texts(token)
        inner.ca.comment = None
    return eol, above


def _texts(token: Any) -> list[str]:
    if token is None:
        return []
    found = []
    for line in str(getattr(token, "value", "")).splitlines():
        text = line.strip().lstrip("#").strip()
        if text:
            found.append(text)
    return found


def _column(node: Any, key: Any) -> int | None:
    """The column `key` was read at, when the node was loaded from text."""
    if not isinstance(node, CommentedMap) or key not in node:
        return None
    try:
        return int(node.lc.key(key)[1])
    except (AttributeError, KeyError, IndexError, TypeError):
        return None


def _shift(node: Any, delta: int, column: int) -> None:
    """Move the comments of a block that moved `delta` columns: end-of-line comments keep their
    distance from the text, and full comment lines at or right of `column` (those written
    inside the block) keep their place relative to its keys."""
    stack = [node]
    seen: set[int] = set()
    while stack and delta:
        current = stack.pop()
        if isinstance(current, dict):
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
        else:
            continue
        comments = getattr(current, "ca", None)
        if comments is None:
            continue
        for token in _tokens([*comments.items.values(), comments.comment]):
            if id(token) not in seen:
                seen.add(id(token))
                _shift_token(token, delta, column)


def _tokens(slots: Any) -> Iterator[Any]:
    for slot in slots:
        if isinstance(slot, list):
            yield from _tokens(slot)
        elif slot is not None and hasattr(slot, "value"):
            yield slot


def _shift_token(token: Any, delta: int, column: int) -> None:
    value = str(token.value)
    head, newline, rest = value.partition("\n")
    mark = getattr(token, "start_mark", None)
    if head.lstrip().startswith("#") and mark is not None and mark.column >= column:
        token.start_mark = copy.copy(mark)
        token.start_mark.column = max(mark.column + delta, 0)
    lines = []
    for line in rest.split("\n"):
        stripped = line.lstrip(" ")
        spaces = len(line) - len(stripped)
        moved = stripped.startswith("#") and spaces >= column
        lines.append(" " * max(spaces + delta, 0) + stripped if moved else line)
    token.value = head + newline + "\n".join(lines)


def _shift_line_comment(parent: CommentedMap, key: str, delta: int) -> None:
    """Keep the end-of-line comment of a scalar that got longer or shorter at its distance."""
    entry = parent.ca.items.get(key)
    token = entry[2] if entry and len(entry) > 2 else None
    mark = getattr(token, "start_mark", None)
    if token is None or mark is None or not str(token.value).startswith("#"):
        return
    token.start_mark = copy.copy(mark)
    token.start_mark.column = max(mark.column + delta, 0)


def _move_comment(source: Any, target: Any, key: Any) -> None:
    if isinstance(source, CommentedMap) and isinstance(target, CommentedMap):
        entry = source.ca.items.pop(key, None)
        if entry is not None:
            target.ca.items[key] = entry


def _insert(parent: dict[Any, Any], at: int, key: Any, value: Any) -> None:
    if isinstance(parent, CommentedMap):
        parent.insert(at, key, value)
        return
    items = list(parent.items())
    items.insert(at, (key, value))
    parent.clear()
    parent.update(items)
