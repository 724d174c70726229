"""A pod's priority, and whether it may preempt: what kube-scheduler's preemption reads.

The scheduler's preemption (pkg/scheduler/framework/plugins/defaultpreemption) evicts pods of
lower `spec.priority` from a node when a pending pod with `preemptionPolicy:
PreemptLowerPriority` fits nowhere. Both fields are written by the Priority admission plugin
(plugin/pkg/admission/priority) from the pod's `priorityClassName`, or from the one PriorityClass
with `globalDefault: true` when it names none (priority 0 without either), and the plugin runs
before the mutating webhooks: a Pod reaches this webhook with them set (seen on the control
plane: tests/e2e/test_preemption.py). A workload's pod template has only the class name, so it
is resolved here, as the plugin would, through the PriorityClasses known (`Classes`).

Whether a pod *may* preempt: its policy is PreemptLowerPriority and some pod could have a lower
priority, i.e. its priority is above `Classes.floor`, the lowest priority a pod can get (0, or
the lowest class value known when a class is below 0). A pod at the floor outranks no one; a pod
whose policy is Never waits its turn on any release.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

Obj = dict[str, Any]

PREEMPT = "PreemptLowerPriority"
NEVER = "Never"


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """What is read of a PriorityClass (`scheduling.k8s.io/v1`)."""

    name: str
    value: int
    preemption_policy: str = PREEMPT
    global_default: bool = False

    @classmethod
    def read(cls, obj: Mapping[str, Any]) -> PriorityClass | None:
        """From a PriorityClass object (raw or slimmed); None when it has no name or value."""
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        value = obj.get("value")
        if not isinstance(name, str) or not name or type(value) is not int:
            return None
        policy = obj.get("preemptionPolicy")
        return cls(
            name,
            value,
            policy if policy in (PREEMPT, NEVER) else PREEMPT,
            obj.get("globalDefault") is True,
        )


BUILT_IN = (
    PriorityClass("system-cluster-critical", 2_000_000_000),
    PriorityClass("system-node-critical", 2_000_001_000),
)
"""The classes every cluster has (the API server creates them)."""


class Priority(NamedTuple):
    """A pod's priority as the scheduler reads it."""

    value: int
    preemption_policy: str
    class_name: str = ""
    """The PriorityClass it came from ("" for none)."""

    @property
    def preempts(self) -> bool:
        return self.preemption_policy == PREEMPT

    def describe(self) -> str:
        """`priority 1000, class inference-high`."""
        named = f", class {self.class_name}" if self.class_name else ""
        return f"priority {self.value}{named}"


class Classes:
    """The PriorityClasses known, by name: the cluster's first, then the declared ones (the
    policy's, for a class the cluster view does not hold), then the built-in ones."""

    def __init__(
        self, cluster: Iterable[PriorityClass] = (), declared: Iterable[PriorityClass] = ()
    ) -> None:
        by_name: dict[str, PriorityClass] = {c.name: c for c in BUILT_IN}
        by_name.update({c.name: c for c in declared})
        by_name.update({c.name: c for c in cluster})
        self._by_name = by_name
        defaults = sorted(
            (c for c in by_name.values() if c.global_default), key=lambda c: (c.value, c.name)
        )
        self.global_default = defaults[0] if defaults else None
        """The class of a pod that names none (of several, the lowest value, as the Priority
        admission plugin picks)."""
        self.floor = min(0, *(c.value for c in by_name.values()))
        """The lowest priority a pod can have: a pod above it may have someone to preempt."""

    def get(self, name: str) -> PriorityClass | None:
        return self._by_name.get(name)

    def preempting(self) -> list[PriorityClass]:
        """The classes whose pods may preempt, by name (built-in ones left out)."""
        built_in = {c.name for c in BUILT_IN}
        return sorted(
            (c for c in self._by_name.values() if c.name not in built_in and self.may(c)),
            key=lambda c: c.name,
        )

    def may(self, c: PriorityClass) -> bool:
        return c.preemption_policy == PREEMPT and c.value > self.floor

    def of_spec(self, spec: Mapping[str, Any]) -> Priority | None:
        """A pod spec's priority: `spec.priority` where it is set (a Pod after the Priority
        admission plugin), else resolved from `priorityClassName` or the global default as the
        plugin would; None when it names a class not known here."""
        name = spec.get("priorityClassName")
        name = name if isinstance(name, str) and name else ""
        found = self.get(name) if name else self.global_default
        if name and found is None and type(spec.get("priority")) is not int:
            return None
        policy = spec.get("preemptionPolicy")
        if policy not in (PREEMPT, NEVER):
            policy = found.preemption_policy if found is not None else PREEMPT
        value = spec.get("priority")
        if type(value) is not int:
            value = found.value if found is not None else 0
        return Priority(value, str(policy), found.name if found is not None else name)

    def may_preempt(self, priority: Priority | None) -> bool:
        """Whether a pod of `priority` may preempt some other pod (the module's docstring)."""
        return priority is not None and priority.preempts and priority.value > self.floor
