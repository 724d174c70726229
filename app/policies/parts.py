"""What the checks build from the policy file at load: each part once, shared by those that ask.

A check's registration (`app/pipeline.py`) declares the builders of what it reads (`builds`):
its compiled admin rules, the CEL runtime, the translation rules, a memo of its answers. The
pipeline calls them at startup, so a part that does not compile (an admin rule, a default
selector) stops startup naming it, and nothing is built on the request path: there, a check
reads a part with `ctx.parts.get(builder)`, a dict lookup, which raises when no registration
declared it.

A builder is a plain function `(parts) -> part` living next to the check that reads the part
(`rules.admin_rules`, `quota.quota_rules`, ...). It may build the parts it depends on with
`parts.build(other)` (translation's templates carry the DeviceClass defaults, which need the
CEL runtime); each is built once whoever asks first.

This module imports nothing of the policies, and every policy module may import it: that is
what keeps the registration table and the policies free of import cycles (the former
`Compiled` bag imported the policy modules and was imported by them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from app.bounded import DEFAULT_MAX_BYTES
from app.config import Policy

T = TypeVar("T")

Builder = Callable[["Parts"], T]
"""Builds one part from the policy (and other parts) at load."""


class Parts:
    """The parts built for one pipeline, by builder. Read-only once sealed."""

    __slots__ = ("_building", "_built", "_sealed", "cache_max_bytes", "policy")

    def __init__(self, policy: Policy, *, cache_max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.policy = policy
        self.cache_max_bytes = cache_max_bytes
        """The byte budget of a cache a part holds whose values grow with the cluster."""
        self._built: dict[Builder[Any], Any] = {}
        self._building: list[Builder[Any]] = []
        self._sealed = False

    def build(self, builder: Builder[T]) -> T:
        """The part `builder` makes, built now unless it was already (at load only)."""
        try:
            return cast(T, self._built[builder])
        except KeyError:
            pass
        if self._sealed:
            raise RuntimeError(f"{_name(builder)}: parts are built at load, not on a request")
        if builder in self._building:
            chain = " -> ".join(_name(b) for b in (*self._building, builder))
            raise RuntimeError(f"parts depend on each other in a circle: {chain}")
        self._building.append(builder)
        try:
            part = builder(self)
        finally:
            self._building.pop()
        self._built[builder] = part
        return part

    def seal(self) -> None:
        """Nothing more is built: from now on `build` only returns what exists."""
        self._sealed = True

    def get(self, builder: Builder[T]) -> T:
        """The part `builder` made at load; raises LookupError when none did (the check's
        registration does not declare it)."""
        try:
            return cast(T, self._built[builder])
        except KeyError:
            raise LookupError(
                f"{_name(builder)} was not built at load: declare it in the registration "
                "of the check that reads it"
            ) from None

    def __contains__(self, builder: object) -> bool:
        return builder in self._built

    def built(self) -> tuple[Builder[Any], ...]:
        """The builders called so far, in the order they finished."""
        return tuple(self._built)


def _name(builder: Builder[Any]) -> str:
    module = getattr(builder, "__module__", "")
    return f"{module}.{getattr(builder, '__qualname__', repr(builder))}"
