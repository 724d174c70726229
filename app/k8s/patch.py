"""JSONPatch (RFC 6902) operations with correct JSON-pointer escaping (RFC 6901)."""

from __future__ import annotations

from typing import Any

PatchOp = dict[str, Any]


def escape(token: str) -> str:
    """Escape one pointer token: `~` -> `~0`, `/` -> `~1` (so `nvidia.com~1gpu`)."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    return "".join("/" + escape(str(token)) for token in tokens)


def add(path: str, value: Any) -> PatchOp:
    return {"op": "add", "path": path, "value": value}


def remove(path: str) -> PatchOp:
    return {"op": "remove", "path": path}


def replace(path: str, value: Any) -> PatchOp:
    return {"op": "replace", "path": path, "value": value}


def resolve(document: Any, path: str) -> Any:
    """The value a JSON pointer names in `document` (KeyError/IndexError when it names none)."""
    node = document
    if not path:
        return node
    for token in path[1:].split("/"):
        key = token.replace("~1", "/").replace("~0", "~")
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node
