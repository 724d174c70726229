"""The `quotas` entries of the policy file, compiled once: which apply to a namespace, and the
strictest limit an amount goes over (device counts, claims, and capacity amounts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.bounded import BoundedCache, CacheName
from app.cluster.view import ClusterReader, Kind
from app.config.policy import ANY_CLASS, Quota
from app.k8s.labels import Selector
from app.k8s.quantity import Quantity, parse_quantity
from app.policies.parts import Parts

PER_REQUEST = "per_request"
PER_CLAIM = "per_claim"
PER_NAMESPACE = "per_namespace"

_MEMO_LIMIT = 4096


# -- the rules, compiled once from the policy file ------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One `quotas` entry with its selector compiled."""

    name: str
    selector: Selector
    deny: bool
    limits: Mapping[str, Mapping[str, int]]
    """PER_REQUEST / PER_CLAIM / PER_NAMESPACE -> DeviceClass (or `*`) -> limit."""
    max_claims: int | None
    allow_all: bool
    capacity: Mapping[str, Mapping[str, Mapping[str, Quantity]]] = field(default_factory=dict)
    """PER_CLAIM / PER_NAMESPACE -> DeviceClass (or `*`) -> capacity name -> limit."""

    @classmethod
    def build(cls, quota: Quota) -> Entry:
        selector = quota.namespace_selector
        return cls(
            name=quota.name,
            selector=Selector.from_policy(selector),
            deny=quota.action == "deny",
            limits={
                PER_REQUEST: dict(quota.max_devices_per_request),
                PER_CLAIM: dict(quota.max_devices_per_claim),
                PER_NAMESPACE: dict(quota.max_devices_per_namespace),
            },
            max_claims=quota.max_claims_per_namespace,
            allow_all=quota.allow_allocation_mode_all,
            capacity={
                PER_CLAIM: _quantities(quota.max_capacity_per_claim),
                PER_NAMESPACE: _quantities(quota.max_capacity_per_namespace),
            },
        )

    def capacity_limit(self, scope: str, device_class: str, capacity: str) -> Quantity | None:
        """The limit on a capacity of a class: the class's own map, else the `*` map."""
        limits = self.capacity.get(scope, {})
        for key in (device_class, ANY_CLASS):
            found = limits.get(key, {}).get(capacity)
            if found is not None:
                return found
        return None

    def limit(self, scope: str, device_class: str) -> int | None:
        limits = self.limits[scope]
        found = limits.get(device_class)
        return found if found is not None else limits.get(ANY_CLASS)


@dataclass(frozen=True, slots=True)
class Breach:
    """The strictest limit an amount exceeds, and whether it denies or only warns."""

    limit: int
    entry: str
    deny: bool
    all_mode: bool = False
    """Exceeded because the request is allocationMode: All, which the entry does not allow."""


class NamespaceQuota:
    """The entries that select one namespace, with per-(scope, class) lookups memoized."""

    def __init__(self, entries: tuple[Entry, ...]) -> None:
        self.entries = entries
        self._memo: BoundedCache[tuple[str, str], tuple[tuple[int, Entry], ...]] = BoundedCache(
            CacheName.QUOTA_LIMITS, _MEMO_LIMIT
        )

    def __bool__(self) -> bool:
        return bool(self.entries)

    @property
    def capacity(self) -> bool:
        """Whether some entry limits capacity (the asks are only read then)."""
        return any(any(by_scope.values()) for e in self.entries for by_scope in e.capacity.values())

    def limits(self, scope: str, device_class: str) -> tuple[tuple[int, Entry], ...]:
        """(limit, entry) of every entry limiting the class in this scope, smallest first."""
        key = (scope, device_class)
        found = self._memo.get(key)
        if found is None:
            pairs = []
            for entry in self.entries:
                value = entry.limit(scope, device_class)
                if value is not None:
                    pairs.append((value, entry))
            found = self._memo.put(key, tuple(sorted(pairs, key=lambda pair: pair[0])))
        return found

    def breach(
        self, scope: str, device_class: str, amount: int | None, used: int = 0
    ) -> Breach | None:
        """The strictest limit `used + amount` goes over (amount None: allocationMode All)."""
        return _strictest(
            (
                Breach(limit, entry.name, entry.deny, amount is None)
                for limit, entry in self.limits(scope, device_class)
                if (amount is None and not entry.allow_all)
                or (amount is not None and used + amount > limit)
            )
        )

    def capacity_breach(
        self,
        scope: str,
        key: tuple[str, str],
        amount: Quantity | None,
        used: Quantity | None = None,
    ) -> CapacityBreach | None:
        """The strictest capacity limit `used + amount` goes over (None: allocationMode All)."""
        device_class, capacity = key
        best: CapacityBreach | None = None
        for entry in self.entries:
            limit = entry.capacity_limit(scope, device_class, capacity)
            if limit is None:
                continue
            if amount is None:
                over = not entry.allow_all
            else:
                total = amount + used if used is not None else amount
                over = total.compare(limit) > 0
            if over and (
                best is None
                or (entry.deny and not best.deny)
                or (entry.deny == best.deny and limit.compare(best.limit) < 0)
            ):
                best = CapacityBreach(limit, entry.name, entry.deny)
        return best

    def claims_breach(self, used: int, amount: int) -> Breach | None:
        return _strictest(
            Breach(entry.max_claims, entry.name, entry.deny)
            for entry in self.entries
            if entry.max_claims is not None and used + amount > entry.max_claims
        )


@dataclass(frozen=True, slots=True)
class CapacityBreach:
    """The strictest capacity limit an amount exceeds."""

    limit: Quantity
    entry: str
    deny: bool


def _quantities(limits: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, Quantity]]:
    """The policy's capacity limits (validated as quantities at load) parsed once."""
    return {
        device_class: {name: parse_quantity(value) for name, value in by_name.items()}
        for device_class, by_name in limits.items()
    }


def _strictest(breaches: Iterable[Breach]) -> Breach | None:
    """A deny beats a warn; among the same action the smallest limit wins."""
    best: Breach | None = None
    for breach in breaches:
        if (
            best is None
            or (breach.deny and not best.deny)
            or (breach.deny == best.deny and breach.limit < best.limit)
        ):
            best = breach
    return best


_NO_QUOTA = NamespaceQuota(())


class QuotaRules:
    """All `quotas` entries; resolves which apply to a namespace (memoized per namespace)."""

    def __init__(self, quotas: Iterable[Quota], resource_quotas: str = "deny") -> None:
        self.entries = tuple(Entry.build(q) for q in quotas)
        self.resource_quotas = resource_quotas
        self._memo: BoundedCache[str, tuple[int, NamespaceQuota]] = BoundedCache(
            CacheName.QUOTA_NAMESPACES, _MEMO_LIMIT
        )

    def for_namespace(
        self, namespace: str, labels: Mapping[str, str], view: ClusterReader
    ) -> NamespaceQuota:
        if not self.entries:
            return _NO_QUOTA
        generation = view.generation(Kind.NAMESPACE)
        memo = self._memo.get(namespace)
        if memo is not None and memo[0] == generation:
            return memo[1]
        matching = tuple(e for e in self.entries if e.selector.matches(labels))
        found = NamespaceQuota(matching) if matching else _NO_QUOTA
        self._memo.put(namespace, (generation, found))
        return found


def quota_rules(parts: Parts) -> QuotaRules:
    """Builder: the policy's `quotas` and `resourceQuotas` settings."""
    return QuotaRules(parts.policy.quotas, parts.policy.resource_quotas)
