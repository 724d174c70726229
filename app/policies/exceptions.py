"""Policy exceptions (policy `exceptions`): which legacy requests of an object one covers, now.

An exception selects an object by its namespace's labels, the labels of the pods the object
makes (a Pod's own, a workload's pod template's: a Deployment is excepted exactly when its pods
are) and its kind; it covers the legacy requests of the containers it names (all when it names
none). Until the end of its `until` day (UTC) a covered request is allowed in dra-only
namespaces and left untranslated in translate ones, with a warning that names the exception and
its end date, and from `WARN_DAYS` days before the end how many days are left. After that the
exception no longer applies, and the warning says it ended.

Time comes from an injected clock (`Clock`), read once per evaluation: tests pass a fixed one,
the server the system's. Selecting does not depend on time, which is what lets the chart's
ValidatingAdmissionPolicy (CEL without a clock) skip exactly the objects an exception selects and
leave the date to the webhook.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from app.config.exceptions import PolicyException
from app.k8s.labels import Selector
from app.k8s.objects import PodSpecRef
from app.policies.parts import Parts
from app.translation.legacy import LegacyRequest

Clock = Callable[[], dt.datetime]
"""Now, timezone-aware."""

WARN_DAYS = 14
"""From this many days before its end, an exception's warning says how many days are left."""


def system_clock() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, slots=True)
class CompiledException:
    """One exception of the policy file, compiled."""

    name: str
    namespaces: Selector
    objects: Selector
    kinds: frozenset[str]
    """Empty: every pod-bearing kind."""
    containers: frozenset[str]
    """Empty: every container."""
    until: dt.date
    reason: str

    @classmethod
    def build(cls, config: PolicyException) -> CompiledException:
        return cls(
            name=config.name,
            namespaces=Selector.from_policy(config.namespace_selector),
            objects=Selector.from_policy(config.object_selector),
            kinds=frozenset(config.kinds),
            containers=frozenset(config.containers),
            until=config.until,
            reason=config.reason,
        )

    @property
    def ends(self) -> dt.datetime:
        """The first instant it no longer applies: midnight UTC after `until`."""
        return dt.datetime.combine(self.until + dt.timedelta(days=1), dt.time(), dt.UTC)

    def selects(self, kind: str, labels: Mapping[str, str], namespace: Mapping[str, str]) -> bool:
        return (
            (not self.kinds or kind in self.kinds)
            and self.namespaces.matches(namespace)
            and self.objects.matches(labels)
        )

    def covers(self, container: str) -> bool:
        return not self.containers or container in self.containers


@dataclass(frozen=True, slots=True)
class Applied:
    """An exception that selects an object, and where it stands at the time of the review."""

    exception: CompiledException
    active: bool
    days_left: int
    """Whole days after today (UTC) that it still applies: 0 on its last day."""

    @property
    def name(self) -> str:
        return self.exception.name

    def when(self) -> str:
        """`until 2026-12-31 (end of day UTC, 3 days left)`, or `ended 2026-12-31`."""
        until = self.exception.until.isoformat()
        if not self.active:
            return f"ended {until} (end of day UTC)"
        if self.days_left > WARN_DAYS:
            return f"until {until} (end of day UTC)"
        if self.days_left == 0:
            return f"until {until} (end of day UTC, its last day)"
        plural = "s" if self.days_left != 1 else ""
        return f"until {until} (end of day UTC, {self.days_left} day{plural} left)"


@dataclass(slots=True)
class Coverage:
    """Which legacy requests of one object the exceptions cover, at the time of the review."""

    covered: list[tuple[LegacyRequest, Applied]] = field(default_factory=list)
    rest: list[LegacyRequest] = field(default_factory=list)
    """Legacy requests no active exception covers: the rule applies to them as usual."""
    ended: list[Applied] = field(default_factory=list)
    """Exceptions that would have covered some of `rest` had they not ended."""

    @property
    def used(self) -> tuple[Applied, ...]:
        """The active exceptions that cover something, each once, in policy order."""
        seen: dict[str, Applied] = {}
        for _, applied in self.covered:
            seen.setdefault(applied.name, applied)
        return tuple(seen.values())

    def warnings(self, effect: str) -> list[str]:
        """One line per exception used or ended. `effect`: what covered requests get, e.g.
        `allowed in this dra-only namespace`."""
        lines = []
        for applied in self.used:
            names = sorted({r.container.name for r, a in self.covered if a is applied})
            count = sum(1 for _, a in self.covered if a is applied)
            lines.append(
                f"exception {applied.name} {applied.when()}: {count} legacy request"
                f"{'s' if count != 1 else ''} (container{'s' if len(names) != 1 else ''} "
                f"{', '.join(names)}) {effect}; reason: {applied.exception.reason}"
            )
        lines += [
            f"exception {applied.name} {applied.when()} no longer applies to this object"
            for applied in self.ended
        ]
        return lines


def cover(selecting: Iterable[Applied], legacy: Iterable[LegacyRequest]) -> Coverage:
    """Split `legacy` into what the active exceptions of `selecting` cover (the first that
    covers a container wins) and the rest."""
    coverage = Coverage()
    selecting = tuple(selecting)
    active = [a for a in selecting if a.active]
    ended: dict[str, Applied] = {}
    for request in legacy:
        name = request.container.name
        applied = next((a for a in active if a.exception.covers(name)), None)
        if applied is not None:
            coverage.covered.append((request, applied))
            continue
        coverage.rest.append(request)
        for a in selecting:
            if not a.active and a.exception.covers(name):
                ended.setdefault(a.name, a)
    coverage.ended = list(ended.values())
    return coverage


class Exceptions:
    """The policy's exceptions, compiled once; evaluated against the injected clock."""

    def __init__(self, configs: Iterable[PolicyException], clock: Clock = system_clock) -> None:
        self.items = tuple(CompiledException.build(config) for config in configs)
        self.clock = clock

    def __bool__(self) -> bool:
        return bool(self.items)

    @property
    def names(self) -> Mapping[str, dt.datetime]:
        """The closed set of exception names (the metrics' `exception` label), each with the
        instant it stops applying (dra_webhook_exception_end_timestamp_seconds)."""
        return MappingProxyType({item.name: item.ends for item in self.items})

    def selecting(
        self, kind: str, spec: PodSpecRef, namespace_labels: Mapping[str, str]
    ) -> tuple[Applied, ...]:
        """Every exception that selects the pods of `spec` (a pod spec of an object of `kind`),
        with its state now (one clock read)."""
        if not self.items:
            return ()
        labels = pod_labels(spec)
        found = [e for e in self.items if e.selects(kind, labels, namespace_labels)]
        if not found:
            return ()
        now = self.clock()
        today = now.astimezone(dt.UTC).date()
        return tuple(
            Applied(e, active=now < e.ends, days_left=(e.until - today).days) for e in found
        )


def pod_labels(spec: PodSpecRef) -> Mapping[str, str]:
    """The labels of the pods `spec` makes: a Pod's own, a workload's pod template's.

    Anything that is not a map of strings counts as no label (the API server refuses such an
    object anyway); it can only make an exception not select, never select more.
    """
    node = spec.meta.get("labels")
    if not isinstance(node, dict):
        return {}
    return {k: v for k, v in node.items() if isinstance(k, str) and isinstance(v, str)}


def policy_exceptions(parts: Parts) -> Exceptions:
    """Builder: the policy's exceptions, judged by the pipeline's clock."""
    return Exceptions(parts.policy.exceptions, parts.clock)
