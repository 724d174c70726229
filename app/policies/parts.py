"""What the checks build from the policy file at load: each part once, shared by those that ask.

A check's registration (`app/pipeline.py`) declares the builders of what it reads (`builds`):
its compiled admin rules, the CEL runtime, the translation rules, a memo of its answers. The
pipeline calls them at startup, so a part that does not compile (an admin rule, a default
selector) stops startup naming it, and nothing is built on the request path: there, a check
reads a part with `ctx.parts[builder]`, a dict lookup, which raises when no registration
declared it.

A builder is a plain function `(parts) -> part` living next to the check that reads the part
(`rules.admin_rules`, `quota.rules.quota_rules`, ...), or in `builders.py` when several checks
read it (translation's rules), so that no check imports another for them. It may build the
parts it depends on with `parts.build(other)` (translation's templates carry the DeviceClass
defaults, which need the CEL runtime); each is built once whoever asks first.

A part that the cluster's changes must keep current (the CEL runtime: its device index and
allocation model follow the ResourceSlices) says so by being a `FollowsView`: the pipeline
subscribes the listeners of every such part it built, at load, and calls its `synced` once the
view has synced, before /readyz. That is the one way a part follows the view; the derived
indexes a check reads are the view's own (a registration's `indexes`).

This module imports nothing of the policies, and every policy module may import it: that is
what keeps the registration table and the policies free of import cycles (the former
`Compiled` bag imported the policy modules and was imported by them).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from app.cluster.view import ClusterReader, Listener
from app.config import Policy

T = TypeVar("T")

Builder = Callable[["Parts"], T]
"""Builds one part from the policy (and other parts) at load."""


@runtime_checkable
class FollowsView(Protocol):
    """A part kept current by the cluster view's change events, subscribed by the pipeline."""

    def listeners(self) -> tuple[Listener, ...]:
        """Subscribed to the view in this order when the pipeline is made (each is replayed
        the view's objects first, then told of every change)."""
        ...

    def synced(self, view: ClusterReader) -> None:
        """Called once when the view has synced, before it reports so (the readiness gate)."""
        ...


class Parts(dict[Builder[Any], Any]):
    """The parts built for one pipeline, by builder. Read-only once sealed.

    A check reads one with `ctx.parts[builder]`: the dict's own lookup (a check may make several
    per review), raising LookupError, naming the builder, when no registration declared it.
    """

    __slots__ = ("_building", "_sealed", "clock", "policy")

    def __init__(
        self,
        policy: Policy,
        *,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        super().__init__()
        self.policy = policy
        self.clock = clock
        """What parts judged by the date read the time from (policy exceptions); tests pass one."""
        self._building: list[Builder[Any]] = []
        self._sealed = False

    if TYPE_CHECKING:

        def __getitem__(self, builder: Builder[T]) -> T: ...

    def __missing__(self, builder: Builder[Any]) -> Any:
        raise LookupError(
            f"{_name(builder)} was not built at load: declare it in the registration "
            "of the check that reads it"
        )

    def get(self, builder: Builder[T], default: Any = None) -> T:
        """`parts[builder]` (a part is never looked up with a default)."""
        return self[builder]

    def __setitem__(self, builder: Builder[Any], part: Any) -> None:
        raise TypeError("a part is made by its builder: parts.build(builder)")

    def build(self, builder: Builder[T]) -> T:
        """The part `builder` makes, built now unless it was already (at load only)."""
        if builder in self:
            return self[builder]
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
        dict.__setitem__(self, builder, part)
        return part

    def seal(self) -> None:
        """Nothing more is built: from now on `build` only returns what exists."""
        self._sealed = True

    def built(self) -> tuple[Builder[Any], ...]:
        """The builders called so far, in the order they finished."""
        return tuple(self)

    def following_view(self) -> tuple[FollowsView, ...]:
        """The parts built that follow the cluster view, in the order they were built."""
        return tuple(part for part in self.values() if isinstance(part, FollowsView))


def _name(builder: Builder[Any]) -> str:
    module = getattr(builder, "__module__", "")
    return f"{module}.{getattr(builder, '__qualname__', repr(builder))}"
