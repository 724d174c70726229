"""Warm before ready: what a first claim after a start would build on the request path, built
when the cluster view has synced, before `/readyz` turns true (the pipeline calls
:func:`warm` then, after the allocation model's own warm-up, `app.allocation.Model.warm`).

- Each DeviceClass's outcomes, and the slices grouped on the paths its selectors read together
  with those of every translation rule naming it (a mapping's selectors, with its pattern's
  `$1`... placeholders filled: the paths read do not depend on them; a share's
  `device.allowMultipleAllocations`): the grouping a translated claim of that rule is matched
  through, ~5-20 ms at 8,000 slices each if built on a request (`app.devices.groups`).
- The CEL cost estimator's parser, through one selector of the usual forms: its lexer builds a
  scanner the first time it meets a context (~3 ms for a first quantity comparison).

A claim reading paths none of those read still groups the slices on its own paths, refined from
its class's grouping (`Grouping.derive`): what any new shape costs.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from typing import Any, Final

from app.cel.cost import estimate
from app.cel.errors import CelCompileError
from app.devices.index import DeviceIndex, class_selectors

__all__ = ["warm"]

logger = logging.getLogger(__name__)

_PLACEHOLDER = re.compile(r"\$\d+")
_USUAL: Final = (
    'device.driver == "d.example.com" && device.attributes["d.example.com"].model in ["a", "b"]'
    ' && device.capacity["d.example.com"].memory.compareTo(quantity("40Gi")) >= 0'
    ' && (device.attributes["d.example.com"].index > 1 || !device.allowMultipleAllocations)'
    ' && device.attributes["d.example.com"].driverVersion.isGreaterThan(semver("1.0.0"))'
    ' && "d.example.com" in device.attributes && device.capacity["d.example.com"].cores.'
    'isLessThan(quantity("50"))'
)
"""A selector of the forms DRA selectors take (string, list, quantity and semver
comparisons, `in`, `!`, `||`): estimated once so that no claim meets the parser cold."""


def warm(
    index: DeviceIndex,
    classes: Mapping[str, Any],
    rules: Iterable[tuple[str, Sequence[str]]] = (),
) -> None:
    """Build, before ready, what a first claim would (the module says what). `rules`: each
    translation rule's DeviceClass name and selectors, as the policy writes them."""
    began = time.perf_counter()
    by_class: dict[str, list[tuple[str, ...]]] = {name: [()] for name in classes}
    for name, selectors in rules:
        if name in classes and selectors:
            by_class[name].append(tuple(_PLACEHOLDER.sub("0", s) for s in selectors))
    for name, wanted in by_class.items():
        expressions = class_selectors(classes[name])
        for selectors in dict.fromkeys(wanted):
            with suppress(CelCompileError):  # its own admission and the claims' say so
                index.group_for(name, expressions, selectors)
    with suppress(CelCompileError):
        estimate(_USUAL)
    logger.info(
        "device groupings warmed",
        extra={
            "classes": len(by_class),
            "rules": sum(len(w) - 1 for w in by_class.values()),
            "seconds": round(time.perf_counter() - began, 3),
        },
    )
