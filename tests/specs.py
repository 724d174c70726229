"""Pod specs of the built-in kinds through the shipped workload catalogue, for tests that name
a kind without its group."""

from __future__ import annotations

from typing import Any

from app.k8s.objects import PodSpecRef
from app.workloads import builtin

BUILT_IN: dict[str, str] = {
    kind: group for group, kind in builtin().kinds() if group in ("", "apps", "batch")
}
"""Built-in kind -> its API group."""


def pod_spec(kind: str, obj: dict[str, Any]) -> PodSpecRef | None:
    """The pod spec of a built-in kind's object (None for another kind or an absent spec)."""
    if kind not in BUILT_IN:
        return None
    specs = builtin().specs(BUILT_IN[kind], kind, obj)
    return specs[0] if specs else None


def spec_parts(kind: str) -> tuple[str, ...]:
    """Where a built-in kind keeps its pod spec, as field names."""
    entry = builtin().entry(BUILT_IN[kind], kind)
    assert entry is not None
    return entry.specs[0].path.steps
