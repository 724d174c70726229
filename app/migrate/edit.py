"""Bring a round-trip YAML tree to a wanted value by changing only the nodes that differ.

Translation writes its result as a plain object (`app.translation.manifest.write`); this module
makes the loaded document equal to it while leaving every node that is already equal alone, so
its comments, quoting, key order and anchors stay where they were. Keys that appear are appended
to their mapping (where `write` puts them); list items are kept, dropped or appended.

A comment on a key that goes (`nvidia.com/gpu: 1  # one GPU`, or on its own line right above
it) goes to the first key that appears in the same mapping or, where none does, in the nearest
enclosing one (the container's `claims` that replace the GPU), as an end-of-line comment on
its first line: what the reviewer wrote about the GPU stays next to what now asks for it.

A node reached twice (an anchor and its aliases) is copied before it is changed at one place, so
an edit meant for one container does not land in another that happens to share the YAML node.
Whatever this cannot express is caught by the caller, which compares the result with the wanted
value and leaves the object alone when they differ.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.tokens import CommentToken


def plain(node: Any) -> Any:
    """The value of a loaded node as dicts, lists and scalars (what translation reads)."""
    if isinstance(node, dict):
        return {str(key): plain(value) for key, value in node.items()}
    if isinstance(node, list):
        return [plain(item) for item in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def shared_nodes(root: Any) -> set[int]:
    """ids of the mappings and lists reached more than once from `root` (anchors with aliases)."""
    seen: set[int] = set()
    shared: set[int] = set()
    for node in _walk(root):
        if id(node) in seen:
            shared.add(id(node))
        seen.add(id(node))
    return shared


def _walk(node: Any) -> Iterator[Any]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            yield current
            stack.extend(current.values())
        elif isinstance(current, list):
            yield current
            stack.extend(current)


def sync(node: Any, wanted: Any, shared: set[int], carried: list[str] | None = None) -> Any:
    """`node` changed in place to equal `wanted` where it can be, else what replaces it.

    The caller stores the returned value where `node` was when it is not `node` itself.
    `carried`: where the comments of dropped keys go when no key appears in this mapping to
    take them (the enclosing mapping's).
    """
    if plain(node) == wanted:
        return node
    if isinstance(node, dict) and isinstance(wanted, dict):
        if id(node) in shared:
            node = _unshared(node)
        gone = [k for k in node if str(k) not in wanted]
        moved = [text for key in gone for text in _take_comments(node, key)]
        orphans = ""
        for key in gone:
            before = _key_before(node, key, wanted)
            lines = _drop_key(node, key)
            if before is None:
                if not _before_first_key(node, lines, wanted):
                    orphans += lines  # nothing stays: after the mapping's new last line
            else:
                _append_lines_at(_entry_tail(node, before), lines)
        added: list[str] = []
        for key, value in wanted.items():
            if key in node:
                updated = sync(node[key], value, shared, moved)
                if updated is not node[key]:
                    node[key] = updated
            else:
                node[key] = fresh(value)
                added.append(key)
        _append_lines(node, orphans)
        if moved and added:
            _put_comment(node, added[0], moved)
        elif moved and carried is not None:
            carried += moved
        return node
    if isinstance(node, list) and isinstance(wanted, list):
        if id(node) in shared:
            node = _unshared(node)
        _sync_list(node, wanted, shared)
        return node
    return fresh(wanted)


def _sync_list(node: list[Any], wanted: list[Any], shared: set[int]) -> None:
    """Drop the items `wanted` does not keep (in order), change the rest, append the new ones."""
    keep: list[int] = []
    at = 0
    for index, item in enumerate(node):
        if at < len(wanted) and plain(item) == wanted[at]:
            keep.append(index)
            at += 1
    if at == len(wanted) or len(keep) == len(node):
        for index in reversed(range(len(node))):
            if index not in keep:
                del node[index]
        for item in wanted[len(node) :]:
            node.append(fresh(item))
        return
    for index, value in enumerate(wanted):  # neither a subsequence nor an extension: item-wise
        if index < len(node):
            updated = sync(node[index], value, shared)
            if updated is not node[index]:
                node[index] = updated
        else:
            node.append(fresh(value))
    del node[len(wanted) :]


def _take_comments(node: dict[Any, Any], key: Any) -> list[str]:
    """The comments about an entry that goes, taken out of the tree: the full lines right above
    it and the end-of-line comments of its lines ("# " and the text, one each)."""
    found: list[str] = []
    keys = list(node)
    at = keys.index(key)
    if at == 0:
        comment = node.ca.comment if isinstance(node, CommentedMap) else None
        if comment and len(comment) > 1 and comment[1]:
            found += _texts("".join(getattr(t, "value", "") or "" for t in comment[1]))
            comment[1] = None
    else:
        slot = _entry_tail(node, keys[at - 1])
        found += _texts(_trailing_lines(slot))
        _cut_trailing_lines(slot)
    found += _end_of_line_comments(node, key)
    return found


def _end_of_line_comments(node: Any, key: Any) -> list[str]:
    """The end-of-line comments on the entry `key` of `node` and the comments within its value."""
    value = node[key]
    found: list[str] = []
    slot = _slot(node, key, 2 if isinstance(node, dict) else 0)
    if slot is not None:
        items, name, position = slot
        entry = items.get(name)
        token = entry[position] if entry and len(entry) > position else None
        text = getattr(token, "value", None)
        if isinstance(text, str) and not text.startswith("\n"):
            found += _texts(text.partition("\n")[0])
    if isinstance(value, dict):
        comment = value.ca.comment if isinstance(value, CommentedMap) else None
        if comment and len(comment) > 1 and comment[1]:  # above its first key
            found += _texts("".join(getattr(t, "value", "") or "" for t in comment[1]))
        for inner in value:
            found += _end_of_line_comments(value, inner)
    elif isinstance(value, list):
        for index in range(len(value)):
            found += _end_of_line_comments(value, index)
    return found


def _texts(lines: str) -> list[str]:
    """The comments of some lines, each without its `#`."""
    found = []
    for line in lines.splitlines():
        text = line.strip()
        if text.startswith("#") and text.lstrip("#").strip():
            found.append(text.lstrip("#").strip())
    return found


def _cut_trailing_lines(slot: Slot | None) -> None:
    """Drop the full comment lines of a slot (they were taken), keeping its end-of-line one."""
    if slot is None:
        return
    items, key, position = slot
    entry = items.get(key)
    token = entry[position] if entry and len(entry) > position else None
    value = getattr(token, "value", None)
    if entry is not None and token is not None and isinstance(value, str) and "\n" in value:
        token.value = value.partition("\n")[0] + "\n"
        if not token.value.strip():
            entry[position] = None


def _put_comment(node: Any, key: Any, texts: list[str]) -> None:
    """End-of-line comment on the first line of the new entry `key` (its first scalar)."""
    comment = "# " + "; ".join(dict.fromkeys(texts))
    value = node[key]
    while isinstance(value, dict | list) and value:
        node, key = value, (0 if isinstance(value, list) else next(iter(value)))
        value = node[key]
    if isinstance(node, CommentedMap | CommentedSeq):
        node.yaml_add_eol_comment(comment, key)


def _drop_key(node: dict[Any, Any], key: Any) -> str:
    """Delete a key; the full-line comments that followed its value are returned.

    ruamel.yaml files a comment line under the last scalar before it, however deep: dropping a
    field must not drop a comment about what comes next. The caller puts them back after the
    mapping's new last line.
    """
    value = node[key]
    if isinstance(value, dict | list) and value:
        lines = _trailing_lines(_tail(value))
    else:
        lines = _trailing_lines(_slot(node, key, 2))
    del node[key]
    return lines


Slot = tuple[dict[Any, Any], Any, int]
"""(a node's `ca.items`, key or index, position of the comment after the value)."""


def _slot(node: Any, key: Any, position: int) -> Slot | None:
    comments = getattr(node, "ca", None)
    return (comments.items, key, position) if comments is not None else None


def _tail(node: Any) -> Slot | None:
    """Where the comment after the last line of `node` is kept."""
    if isinstance(node, dict) and node:
        key = list(node)[-1]
        value = node[key]
        return _tail(value) if isinstance(value, dict | list) and value else _slot(node, key, 2)
    if isinstance(node, list) and node:
        value = node[-1]
        if isinstance(value, dict | list) and value:
            return _tail(value)
        return _slot(node, len(node) - 1, 0)
    return None


def _trailing_lines(slot: Slot | None) -> str:
    """The full comment lines of a slot, after its end-of-line comment."""
    if slot is None:
        return ""
    items, key, position = slot
    entry = items.get(key)
    token = entry[position] if entry and len(entry) > position else None
    value = getattr(token, "value", None)
    if not isinstance(value, str) or "\n" not in value:
        return ""
    return value.partition("\n")[2]


def _before_first_key(node: dict[Any, Any], lines: str, wanted: dict[str, Any]) -> bool:
    """Comment lines above the first key that stays (where they were, the keys before gone)."""
    if not lines or not isinstance(node, CommentedMap) or not any(str(k) in wanted for k in node):
        return False
    tokens = [
        CommentToken(line.strip() + "\n", CommentMark(len(line) - len(line.lstrip())), None)
        for line in lines.splitlines()
        if line.strip()
    ]
    comment = node.ca.comment
    if comment is None or len(comment) < 2:
        node.ca.comment = [None, tokens]
    else:
        comment[1] = (comment[1] or []) + tokens
    return True


def _key_before(node: dict[Any, Any], key: Any, wanted: dict[str, Any]) -> Any:
    """The nearest key before `key` that stays, or None."""
    keys = list(node)
    for candidate in reversed(keys[: keys.index(key)]):
        if str(candidate) in wanted:
            return candidate
    return None


def _entry_tail(node: Any, key: Any) -> Slot | None:
    """Where the comment after the last line of the entry `key` of `node` is kept."""
    value = node[key]
    return _tail(value) if isinstance(value, dict | list) and value else _slot(node, key, 2)


def _append_lines(node: Any, lines: str) -> None:
    """Put comment lines after the last line of `node`."""
    _append_lines_at(_tail(node), lines)


def _append_lines_at(slot: Slot | None, lines: str) -> None:
    if slot is None or not lines:
        return
    items, key, position = slot
    entry = items.setdefault(key, [None, None, None, None] if position == 2 else [None, None])
    token = entry[position]
    if token is None:
        entry[position] = CommentToken("\n" + lines, CommentMark(0), None)
        return
    value = token.value if token.value.endswith("\n") else token.value + "\n"
    token.value = value + lines


def _unshared(node: Any) -> Any:
    """A copy of a node that other places also hold, without its anchor."""
    duplicate = copy.deepcopy(node)
    anchor = getattr(duplicate, "anchor", None)
    if anchor is not None and getattr(anchor, "value", None) is not None:
        anchor.value = None
    return duplicate


def fresh(value: Any) -> Any:
    """New content as round-trip nodes, block style."""
    if isinstance(value, dict):
        result = CommentedMap()
        for key, item in value.items():
            result[key] = fresh(item)
        return result
    if isinstance(value, list):
        return CommentedSeq(fresh(item) for item in value)
    return value


def drop(node: Any, key: Any) -> None:
    """Delete the entry `key` of a loaded mapping, keeping the comments written on it or above
    it as full lines where it was (no field replaces it to carry them)."""
    keys = list(node)
    if key not in keys:
        return
    at = keys.index(key)
    try:
        column = int(node.lc.key(key)[1])
    except (AttributeError, KeyError, IndexError, TypeError):
        column = 0  # a node made here, not read from text
    lost: list[str] = []
    sync(node, {str(k): plain(v) for k, v in node.items() if k != key}, set(), lost)
    if lost and at > 0:
        _append_lines_at(
            _entry_tail(node, keys[at - 1]), "".join(f"{' ' * column}# {t}\n" for t in lost)
        )


def put_lines_before(node: Any, key: Any, lines: str) -> bool:
    """Comment lines (with their indentation) above the entry `key` of a mapping: filed after
    the last line of the entry before it, where ruamel.yaml keeps such lines. False when `key`
    is the mapping's first (the caller puts them elsewhere)."""
    keys = list(node) if isinstance(node, CommentedMap) else []
    if key not in keys or keys.index(key) == 0 or not lines:
        return False
    _append_lines_at(_entry_tail(node, keys[keys.index(key) - 1]), lines)
    return True


def merges_hold(root: Any) -> bool:
    """Whether every mapping under `root` with `<<` merge keys reads back as it reads now.

    ruamel.yaml shows the merged keys as the mapping's own, and deleting one only hides it
    until the document is read again, when the merge brings it back (a GPU limit merged from an
    anchor would survive its removal). A mapping reads back as its own keys over what its merge
    sources hold (the first source wins).
    """
    for node in _walk(root):
        merge = getattr(node, "merge", None) if isinstance(node, CommentedMap) else None
        if not merge:
            continue
        reread: dict[Any, Any] = {}
        for source in reversed(list(merge)):
            if isinstance(source, dict):
                reread.update(source)
        own = getattr(node, "_ok", set(node))  # the keys written in the mapping itself
        reread.update({key: node[key] for key in own if key in node})
        if plain(reread) != plain(node):
            return False
    return True
