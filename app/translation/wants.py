"""What translation can do with each legacy request: a want (count + mapping) or a problem.

Shared by the plan (`app.translation.plan`) and the sharing rules (`app.translation.sharing`),
which both read legacy counts as whole numbers and report what they cannot translate at a field.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.k8s.quantity import whole_count
from app.translation.legacy import DeviceMapping, LegacyRequest

Key = tuple[str, str, str]
"""(container field, container name, resource): one legacy request, comparable across objects."""


@dataclass(frozen=True, slots=True)
class Want:
    """A legacy request that can be translated: its whole-number count and its mapping."""

    legacy: LegacyRequest
    count: int
    mapping: DeviceMapping
    also: tuple[LegacyRequest, ...] = ()
    """The other names of a sharing group (gpumem next to nvidia.com/gpu), removed with it."""

    @property
    def requests(self) -> tuple[LegacyRequest, ...]:
        """Every legacy request this want replaces, the primary first."""
        return (self.legacy, *self.also)


@dataclass(frozen=True, slots=True)
class Problem:
    """Why one legacy request (or the pod) cannot be translated, at one field."""

    key: Key
    path: str
    message: str


def request_key(legacy: LegacyRequest) -> Key:
    return legacy.container.field, legacy.container.name, legacy.resource


def count(legacy: LegacyRequest, what: str = "whole devices") -> tuple[int, Problem | None]:
    """The whole-number value of a request (limits and requests agreeing), or why it has none."""
    counts: dict[str, int] = {}
    for which, raw in (("limits", legacy.limit), ("requests", legacy.request)):
        if raw is None:
            continue
        value = whole_count(raw)
        if value is None:
            return 0, Problem(
                request_key(legacy),
                f"{legacy.container.path}.resources.{which}[{legacy.resource}]",
                f"{raw!s} is not a whole number: {legacy.resource} is counted in {what}",
            )
        counts[which] = value
    if len(counts) == 2 and counts["limits"] != counts["requests"]:
        return 0, Problem(
            request_key(legacy),
            f"{legacy.container.path}.resources.requests[{legacy.resource}]",
            f"requests ({legacy.request}) and limits ({legacy.limit}) of {legacy.resource} "
            "differ; they must be equal",
        )
    return next(iter(counts.values())), None
