"""The selectors' nearest miss: a request matches fewer devices in the whole cluster than it
needs, which of its selectors leaves too few, and what the devices offer instead for what that
selector reads ("largest gpu.nvidia.com/memory is 80Gi").

The offer is read from every device of the class, each distinct value compared once; it is
the one part of a "never" answer that reads the devices themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from app.cel import syntax
from app.cel.cost import Budget
from app.cel.device import Device
from app.cel.index import DeviceIndex
from app.k8s.claims import Alternative

__all__ = ["MAX_HINT_VALUES", "devices", "offers", "short_text"]

MAX_HINT_VALUES: Final = 5


def devices(n: int) -> str:
    return f"{n} device{'s' if n != 1 else ''}"


def short_text(
    alt: Alternative,
    class_expressions: Sequence[str],
    index: DeviceIndex,
    matched: int,
    budget: Budget | None = None,
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
            offered = offers(expression, base.devices)
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


def offers(expression: str, among: Sequence[Device]) -> str:
    """What the devices offer for the paths the expression reads: the nearest miss."""
    hints = []
    seen = set()
    for path in syntax.device_paths(expression):
        keys = path.keys
        if len(keys) < 3 or None in keys[:3] or keys[:3] in seen:
            continue
        seen.add(keys[:3])
        kind, domain, name = str(keys[0]), str(keys[1]), str(keys[2])
        if kind == "capacity":
            quantities = _distinct(d.capacity.get(domain, {}).get(name) for d in among)
            hints.append(
                f"largest {domain}/{name} is {max(quantities)}"
                if quantities
                else f"no device has capacity {domain}/{name}"
            )
        elif kind == "attributes":
            values = {
                str(v) for v in _distinct(d.attributes.get(domain, {}).get(name) for d in among)
            }
            if not values:
                hints.append(f"no device has attribute {domain}/{name}")
            else:
                shown = sorted(values)[:MAX_HINT_VALUES]
                more = ", ..." if len(values) > MAX_HINT_VALUES else ""
                hints.append(f"{domain}/{name} is {', '.join(shown)}{more}")
    return "".join(f"{h}; " for h in hints)


def _distinct(values: Iterable[Any]) -> list[Any]:
    """The values that are not None, each object once, in first-seen order: quantities and
    attribute values are shared between devices (parsed once per text), so the comparisons
    and conversions that follow run once per distinct value, not once per device."""
    seen: dict[int, Any] = {}
    for value in values:
        if value is not None and id(value) not in seen:
            seen[id(value)] = value
    return list(seen.values())
