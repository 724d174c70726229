"""One bounded cache for every memo in app/: LRU by count and, where values grow with the cluster,
by bytes; counted in /metrics.

Every cache here holds something that user input or the cluster's size can multiply (expressions,
request shapes, quantities, namespaces, device-match results), so each is bounded, and evicts the
least recently used entry rather than clearing itself when full (a full memo that clears drops
the hot entries with the cold).

**One budget for the process.** Every entry is also counted in bytes (its key and its value: a
cache whose values are objects passes a function sizing them, the rest are sized by
:func:`approx_bytes`), and the bytes of all caches together stay within one budget,
`DRA_WEBHOOK_CACHE_MAX_BYTES` (`app/config/settings.py`, set by :func:`set_budget`). The rule that
splits it: each cache name has a fixed share (:data:`SHARES`: the six caches whose entries grow
with expressions or with the cluster get most of it, the others split what is left equally),
and every cache of that name (one per pipeline, or per namespace's quota) charges one ledger
for that share. A cache whose put takes its name's ledger over the share evicts its own least
recently used entries until it fits; an entry larger than the whole share is returned but not
kept. So the sum of the caches' bytes never passes the budget, whatever reviews arrive; the
cluster view's own data (slices, claims) is not a cache and is sized by the cluster
(charts/dra-webhook/README.md, "Memory").

Each cache is named from a closed set (`CacheName`), which is the `cache` label of the
`dra_webhook_cache_*` families in /metrics: hits, misses and evictions as counters, entries and
bytes as gauges. Caches register themselves, weakly, in `live_caches()` when made (a registry of
weak references, like prometheus-client's default registry: the metrics layer reads it at scrape
time, and a cache goes from it when its owner goes). With several workers each process reports
its own caches, as the CEL counters do.

A cache is not locked: the event loop is its one thread, except the CEL compile cache, which
holds its own lock around it (`app/cel/cache.py`). `memoized` wraps a pure function of hashable
arguments, as `functools.lru_cache` does; exceptions are not cached.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, fields, is_dataclass
from enum import StrEnum
from functools import wraps
from typing import Final, Generic, ParamSpec, TypeVar, cast, overload

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")
P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_MAX_BYTES: Final = 128 * 1024 * 1024
"""The byte budget of all caches together, unless the setting says otherwise: 128 MiB keeps a
64k-device cluster's process under 768 MiB RSS with the view itself (~1.4 KB per device) and the
interpreter (charts/dra-webhook/README.md, "Memory")."""


class CacheName(StrEnum):
    """Every cache in app/, and the value of the `cache` label in /metrics."""

    CEL_COMPILE = "cel-compile"
    """Compiled CEL programs (and compile errors) by backend, environment and expression."""
    CEL_DEVICE_MATCH = "cel-device-match"
    """Devices a class + selectors match: an outcome per group of slices alike (byte-bounded)."""
    CEL_DEVICE_GROUPS = "cel-device-groups"
    """ResourceSlices grouped by their values on the paths a selector set reads (byte-bounded)."""
    CEL_DEVICE_PATHS = "cel-device-paths"
    """The device fields an expression reads (which devices share an outcome)."""
    CEL_TAGGED_VALUES = "cel-tagged-values"
    """cel-expr-python: quantities and semvers decoded from their runtime strings."""
    CEL_ORDER_KEYS = "cel-order-keys"
    """cel-expr-python: comparison keys of quantities and semvers."""
    SEMVERS = "semvers"
    """Parsed semantic versions (CEL's semver library)."""
    QUANTITIES = "quantities"
    """Parsed Kubernetes quantities."""
    REGEX_PATTERNS = "regex-patterns"
    """RE2 programs of patterns from user input."""
    LEGACY_NAMES = "legacy-names"
    """Whether a resource name is a legacy extended resource (`legacyResources`)."""
    NEAR_MISS_NAMES = "near-miss-names"
    """The legacy name a resource name is probably a typo of (`translation.near_miss`)."""
    MAPPINGS = "mappings"
    """A legacy name's DeviceClass mapping from the policy's `mappings`."""
    DRA_ONLY_ANSWERS = "dra-only-answers"
    """dra-only's answers by request shape."""
    QUOTA_NAMESPACES = "quota-namespaces"
    """The quota entries that apply to a namespace."""
    QUOTA_LIMITS = "quota-limits"
    """A namespace's limits by scope and DeviceClass."""
    TRANSLATED_SPECS = "translated-specs"
    """What translating a Pod's spec makes (claims, patch, templates), by the spec's JSON and
    the view's generations the plan read."""
    TEMPLATE_SHAPES = "template-shapes"
    """Translation's ResourceClaimTemplates by shape (with the DeviceClass defaults applied)."""
    CLAIM_NAMES = "claim-names"
    """Translation's claim names by prefix, resource and container."""
    WHOLE_NUMBERS = "whole-numbers"
    """Legacy request amounts read as whole device counts."""
    TEMPLATE_TOUCHES = "template-touches"
    """Templates marked used lately (not marked again on every pod)."""
    TEMPLATE_MATCHES = "template-matches"
    """Whether a stored template is the one translation wants, per pair of objects."""
    MERGED_DECISIONS = "merged-decisions"
    """The pipeline's merged decision by the identity of the shared results merged."""
    DENIAL_TEXTS = "denial-texts"
    """A memoized denial's message text."""
    SATISFIABILITY_VERDICTS = "satisfiability-verdicts"
    """never / not now / ok by claim shape and the generations of slices, claims and classes."""
    NEAREST_MISS_OFFERS = "nearest-miss-offers"
    """What the devices of a class offer for a path a selector reads, per class match."""
    CAPACITY_POLICIES = "capacity-policies"
    """The requestPolicy a DeviceClass's shareable devices agree on, per capacity."""
    NAMESPACE_LOOKUPS = "namespace-lookups"
    """Namespaces read from the API server lately (the live view's rate limit)."""
    LOG_LINES = "log-lines"
    """The text of a log line's repeating values (a review's kind, namespace, ...) per tuple of
    them (`app.logs.LineShape`)."""


_LARGE_SHARES: Final = {
    CacheName.CEL_COMPILE: 0.30,
    CacheName.CEL_DEVICE_MATCH: 0.20,
    CacheName.SATISFIABILITY_VERDICTS: 0.12,
    CacheName.CEL_DEVICE_GROUPS: 0.10,
    CacheName.CEL_DEVICE_PATHS: 0.08,
    CacheName.NEAREST_MISS_OFFERS: 0.05,
}
"""The caches whose entries grow with the expressions they are keyed by or with the cluster."""

SHARES: Final[dict[CacheName, float]] = {
    name: _LARGE_SHARES.get(
        name, (1 - sum(_LARGE_SHARES.values())) / (len(CacheName) - len(_LARGE_SHARES))
    )
    for name in CacheName
}
"""Each cache name's share of the process budget; they sum to 1."""


class Ledger:
    """The bytes every cache of one name holds, against that name's share of the budget."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0


_LEDGERS: Final[dict[CacheName, Ledger]] = {
    name: Ledger(int(share * DEFAULT_MAX_BYTES)) for name, share in SHARES.items()
}
"""One per name; process-wide like the budget they split (`set_budget`)."""


def set_budget(total: int) -> None:
    """Split `total` bytes between the cache names by :data:`SHARES` (at startup, before the
    caches fill; caches already over a smaller share shrink on their next put)."""
    for name, share in SHARES.items():
        _LEDGERS[name].limit = int(share * total)


def budget() -> dict[CacheName, int]:
    """Each cache name's share of the budget, in bytes."""
    return {name: ledger.limit for name, ledger in _LEDGERS.items()}


_SMALL: Final = 64
"""What an object :func:`approx_bytes` does not look into is counted as (a small instance)."""


def approx_bytes(value: object, depth: int = 16) -> int:
    """About the bytes ``value`` holds: strings by their length; tuples, lists, sets, dicts and
    dataclasses by their items (what cache keys and small values are made of), ``depth`` levels
    down; numbers and other objects as small. Cheap enough for a put (it runs when an entry is
    stored, not when it is read); a cache whose values are large objects passes its own size."""
    if isinstance(value, str | bytes):
        return 49 + len(value)
    if depth <= 0:
        return _SMALL
    if isinstance(value, tuple | frozenset | list | set):
        return 56 + 8 * len(value) + sum(approx_bytes(item, depth - 1) for item in value)
    if isinstance(value, dict):
        return 64 + sum(
            24 + approx_bytes(k, depth - 1) + approx_bytes(v, depth - 1) for k, v in value.items()
        )
    if is_dataclass(value) and not isinstance(value, type):
        return _SMALL + sum(
            approx_bytes(getattr(value, f.name, None), depth - 1) for f in fields(value)
        )
    return _SMALL


@dataclass(frozen=True, slots=True)
class CacheStats:
    """One cache's counters at one moment."""

    name: CacheName
    entries: int
    bytes: int
    hits: int
    misses: int
    evictions: int


_LIVE: weakref.WeakSet[BoundedCache[object, object]] = weakref.WeakSet()
_RETIRED: dict[CacheName, list[int]] = {}
"""Hits, misses and evictions of caches gone (a pipeline replaced, a namespace's quota memo
evicted), so the counters in /metrics never go down."""


def live_caches() -> list[BoundedCache[object, object]]:
    """Every cache made in this process and still in use."""
    return list(_LIVE)


def cache_stats() -> dict[CacheName, CacheStats]:
    """The counters of the live caches, summed per name (a name may have one cache per
    pipeline or per namespace's quota)."""
    totals: dict[CacheName, list[int]] = {
        name: [0, 0, *retired] for name, retired in _RETIRED.items()
    }
    for cache in live_caches():
        total = totals.setdefault(cache.name, [0, 0, 0, 0, 0])
        total[0] += len(cache)
        total[1] += cache.bytes
        total[2] += cache.hits
        total[3] += cache.misses
        total[4] += cache.evictions
    return {name: CacheStats(name, *total) for name, total in totals.items()}


class BoundedCache(Generic[K, V]):
    """An LRU map bounded by entries, by its name's share of the process budget (keys and
    values counted) and, optionally, by a byte bound of its own (`max_bytes`)."""

    __slots__ = (
        "__weakref__",
        "_data",
        "_ledger",
        "_sizes",
        "bytes",
        "evictions",
        "hits",
        "max_bytes",
        "max_entries",
        "misses",
        "name",
        "on_evict",
        "size",
    )

    def __init__(
        self,
        name: CacheName,
        max_entries: int,
        *,
        max_bytes: int | None = None,
        size: Callable[[V], int] | None = None,
        on_evict: Callable[[K, V], None] | None = None,
    ) -> None:
        self.name = name
        self.hits = self.misses = self.evictions = 0
        self.bytes = 0
        self._ledger = _LEDGERS[name]
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.size: Callable[[V], int] = approx_bytes if size is None else size
        """About the bytes a value holds (its key is sized by :func:`approx_bytes`)."""
        self.on_evict = on_evict
        """Called with each entry evicted for a bound (not for pop or clear): what holds on to
        an evicted value elsewhere can let it go too."""
        self._data: OrderedDict[K, V] = OrderedDict()
        self._sizes: dict[K, int] = {}
        _LIVE.add(cast("BoundedCache[object, object]", self))

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def items(self) -> list[tuple[K, V]]:
        """The entries, least recently used first (a copy: neither counted nor refreshed)."""
        return list(self._data.items())

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: object = None) -> object:
        """The value (now the most recently used), or `default`; counts a hit or a miss."""
        data = self._data
        try:
            value = data[key]
            data.move_to_end(key)
        except KeyError:  # not there (or evicted by another thread between the two lines)
            self.misses += 1
            return default
        self.hits += 1
        return value

    def peek(self, key: K) -> V | None:
        """The value, without counting or refreshing it."""
        return self._data.get(key)

    def reader(self) -> Callable[[K], V | None]:
        """`peek` as the underlying dict's own `get`, for the hottest paths (a CEL comparison
        per device): a hit there is neither counted nor refreshed, so the caller falls back to
        `get` on a miss, which counts it."""
        return self._data.get

    def put(self, key: K, value: V) -> V:
        """Store `value` (the most recently used), evict what goes over a bound; returns it.

        A value larger than a whole byte bound (its own, or its name's share) is returned
        without being stored; so is one that does not fit once this cache holds nothing (the
        share is held by other caches of its name)."""
        data = self._data
        if key in data:
            self._drop(key)
        size = approx_bytes(key) + self.size(value)
        ledger = self._ledger
        if size > ledger.limit or (self.max_bytes is not None and size > self.max_bytes):
            self.evictions += 1
            return value
        self._sizes[key] = size
        self.bytes += size
        ledger.used += size
        data[key] = value
        while (
            len(data) > self.max_entries
            or ledger.used > ledger.limit
            or (self.max_bytes is not None and self.bytes > self.max_bytes)
        ):
            oldest = next(iter(data))
            evicted = data[oldest]
            self._drop(oldest)
            self.evictions += 1
            if self.on_evict is not None and oldest != key:
                self.on_evict(oldest, evicted)
            if oldest == key:
                break  # other caches of its name hold the share
        return value

    def pop(self, key: K) -> V | None:
        """Remove and return the value of `key` (None when absent); not an eviction."""
        if key not in self._data:
            return None
        value = self._data[key]
        self._drop(key)
        return value

    def clear(self) -> None:
        """Forget everything (what it was derived from changed); not counted as evictions."""
        self._data.clear()
        self._sizes.clear()
        self._ledger.used -= self.bytes
        self.bytes = 0

    def __del__(self) -> None:
        self._ledger.used -= self.bytes
        retired = _RETIRED.setdefault(self.name, [0, 0, 0])
        retired[0] += self.hits
        retired[1] += self.misses
        retired[2] += self.evictions

    def stats(self) -> CacheStats:
        return CacheStats(
            self.name, len(self._data), self.bytes, self.hits, self.misses, self.evictions
        )

    def _drop(self, key: K) -> None:
        del self._data[key]
        size = self._sizes.pop(key)
        self.bytes -= size
        self._ledger.used -= size


def memoized(name: CacheName, max_entries: int) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`functools.lru_cache(maxsize=max_entries)` on a BoundedCache named `name` (positional,
    hashable arguments; a raised exception is not cached). The cache is the wrapper's `cache`."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        cache: BoundedCache[Hashable, R] = BoundedCache(name, max_entries)
        data = cache._data

        @wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            key: Hashable = (args, tuple(kwargs.items())) if kwargs else args
            try:
                value = data[key]
                data.move_to_end(key)
            except KeyError:
                cache.misses += 1
                return cache.put(key, function(*args, **kwargs))
            cache.hits += 1
            return value

        wrapper.cache = cache  # type: ignore[attr-defined]
        return wrapper

    return decorate
