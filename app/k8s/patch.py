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
