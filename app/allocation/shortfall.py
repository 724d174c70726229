"""The selectors' nearest miss: a request matches fewer devices in the whole cluster than it
needs, which of its selectors leaves too few, and what the devices offer instead for what that
selector reads ("largest gpu.nvidia.com/memory is 80Gi").

The offer is read from every device of the class (each distinct value compared once), the one
part of a "never" answer that reads the devices themselves: once per class and path while the
class's match stands (:class:`Offers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from app.bounded import BoundedCache, CacheName
from app.cel import syntax
from app.cel.cost import Budget
from app.cel.device import Device
from app.devices.index import DeviceIndex, Match
from app.k8s.claims import Alternative

__all__ = ["MAX_HINT_VALUES", "OFFERS_KEPT", "Offers", "devices", "short_text"]

MAX_HINT_VALUES: Final = 5
OFFERS_KEPT: Final = 64
"""Class + path pairs whose offers are kept."""


def devices(n: int) -> str:
    return f"{n} device{'s' if n != 1 else ''}"


def short_text(
    alt: Alternative,
    class_expressions: Sequence[str],
    index: DeviceIndex,
    matched: int,
    *,
    budget: Budget | None = None,
    offers: Offers | None = None,
) -> str:
    base = index.matching(alt.device_class, class_expressions, budget=budget)
    wanted = devices(alt.needed)
    if base.count == 0:
        text = (
            f"no device in the cluster matches DeviceClass {alt.device_class} "
            f"({base.considered} devices published)"
        )
        return text + (f"; first error: {base.first_error}" if base.first_error else "")
    blockers = []
    for _, expression in alt.selectors:
        alone = index.matching(alt.device_class, class_expressions, [expression], budget)
        if alone.count < alt.needed:
            offered = (offers or Offers(0)).text(
                expression, base, (alt.device_class, tuple(class_expressions))
            )
            blockers.append(
                f"{offered}{alone.count} of the {base.count} devices of class {alt.device_class} "
                f"match {expression!r}"
            )
    if not blockers:
        blockers.append(
            f"each selector matches enough of the {base.count} devices of class "
            f"{alt.device_class}, but only {matched} match all of them"
        )
    return f"asks for {wanted}, {matched} can match: " + "; ".join(blockers)


class Offers:
    """What the devices of a class offer for each path a selector reads, kept per class and
    path for the class's current match (a slice change makes a new match: read again). An
    impossible shape of a class then costs what a possible one does, not a read of every
    device. Bounded (an LRU counted in /metrics); an entry holds the match it was read from."""

    def __init__(self, size: int = OFFERS_KEPT) -> None:
        self._kept: BoundedCache[tuple[Any, ...], tuple[Match, str | None]] | None = (
            BoundedCache(CacheName.NEAREST_MISS_OFFERS, size) if size > 0 else None
        )

    def text(
        self, expression: str, base: Match, key: tuple[str, tuple[str, ...]] | None = None
    ) -> str:
        """What ``base``'s devices offer for the paths ``expression`` reads ("largest
        gpu.nvidia.com/memory is 80Gi; "), each path's text kept under ``key`` (the class
        name and expressions; None, or an ``Offers(0)``: not kept)."""
        hints = []
        seen = set()
        for path in syntax.device_paths(expression):
            keys = path.keys
            if len(keys) < 3 or None in keys[:3] or keys[:3] in seen:
                continue
            seen.add(keys[:3])
            kind, domain, name = str(keys[0]), str(keys[1]), str(keys[2])
            kept = self._kept if key is not None else None
            found = kept.get((key, kind, domain, name)) if kept is not None else None
            if found is None or found[0] is not base:
                found = (base, _offered(kind, domain, name, base.devices))
                if kept is not None:
                    kept.put((key, kind, domain, name), found)
            if found[1] is not None:
                hints.append(found[1])
        return "".join(f"{h}; " for h in hints)


def _offered(kind: str, domain: str, name: str, among: Sequence[Device]) -> str | None:
    if kind == "capacity":
        quantities = _distinct(d.capacity.get(domain, {}).get(name) for d in among)
        return (
            f"largest {domain}/{name} is {max(quantities)}"
            if quantities
            else f"no device has capacity {domain}/{name}"
        )
    if kind == "attributes":
        values = {str(v) for v in _distinct(d.attributes.get(domain, {}).get(name) for d in among)}
        if not values:
            return f"no device has attribute {domain}/{name}"
        shown = sorted(values)[:MAX_HINT_VALUES]
        more = ", ..." if len(values) > MAX_HINT_VALUES else ""
        return f"{domain}/{name} is {', '.join(shown)}{more}"
    return None


def _distinct(values: Iterable[Any]) -> list[Any]:
    """The values that are not None, each object once, in first-seen order: quantities and
    attribute values are shared between devices (parsed once per text), so the comparisons
    and conversions that follow run once per distinct value, not once per device."""
    seen: dict[int, Any] = {}
    for value in values:
        if value is not None and id(value) not in seen:
            seen[id(value)] = value
    return list(seen.values())
