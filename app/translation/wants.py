"""What translation can do with each legacy request: a want (count + mapping) or a problem.

Shared by the plan (`app.translation.plan`) and the sharing rules (`app.translation.sharing`),
which both read legacy counts as whole numbers and report what they cannot translate at a field.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.bounded import CacheName, memoized
from app.k8s.quantity import QuantityError, parse_quantity
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
        value = whole_number(raw)
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


def whole_number(raw: object) -> int | None:
    """A quantity that is a non-negative whole number (`2`, `"2"`, `"1k"`, `"2000m"`), else None."""
    if isinstance(raw, str):
        return _whole_number_text(raw)
    if not isinstance(raw, int | float):
        return None
    return _whole_number_of(raw)


@memoized(CacheName.WHOLE_NUMBERS, 1024)
def _whole_number_text(raw: str) -> int | None:
    """Memoized: the same few counts ("1", "2", "8") arrive again and again."""
    return _whole_number_of(raw)


def _whole_number_of(raw: str | int | float) -> int | None:
    try:
        quantity = parse_quantity(raw)
    except QuantityError:
        return None
    if not quantity.is_integer() or quantity.sign() < 0:
        return None
    return quantity.as_int()
