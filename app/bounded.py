"""One bounded cache for every memo in app/: LRU by count and, where values grow with the cluster,
by bytes; counted in /metrics.

Every cache here holds something that user input or the cluster's size can multiply (expressions,
request shapes, quantities, namespaces, device-match results), so each is bounded, and evicts the
least recently used entry rather than clearing itself when full (a full memo that clears drops
the hot entries with the cold). A cache whose values grow with the cluster (the device-match memo
holds a tuple of devices per selector set: 64k devices make one entry half a megabyte) also takes
a byte budget and a function sizing each value; `DRA_WEBHOOK_CACHE_MAX_BYTES` sets that budget
(`app/config/settings.py`).

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
from dataclasses import dataclass
from enum import StrEnum
from functools import wraps
from typing import Final, Generic, ParamSpec, TypeVar, cast, overload

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")
P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_MAX_BYTES: Final = 128 * 1024 * 1024
"""The byte budget of a cache whose values grow with the cluster, unless the setting says
otherwise: 128 MiB keeps a 64k-device cluster's process under 600 MiB RSS with the view itself
(~1.4 KB per device) and the interpreter."""


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
    MAPPINGS = "mappings"
    """A legacy name's DeviceClass mapping from the policy's `mappings`."""
    DRA_ONLY_ANSWERS = "dra-only-answers"
    """dra-only's answers by request shape."""
    QUOTA_NAMESPACES = "quota-namespaces"
    """The quota entries that apply to a namespace."""
    QUOTA_LIMITS = "quota-limits"
    """A namespace's limits by scope and DeviceClass."""
    TEMPLATE_SHAPES = "template-shapes"
    """Translation's ResourceClaimTemplates by shape (with the DeviceClass defaults applied)."""
    CLAIM_NAMES = "claim-names"
    """Translation's claim names by prefix, resource and container."""
    WHOLE_NUMBERS = "whole-numbers"
    """Legacy request amounts read as whole device counts."""
    TEMPLATE_TOUCHES = "template-touches"
    """Templates marked used lately (not marked again on every pod)."""
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
    """An LRU map bounded by entries and, optionally, by the summed size of its values."""

    __slots__ = (
        "__weakref__",
        "_data",
        "_sizes",
        "bytes",
        "evictions",
        "hits",
        "max_bytes",
        "max_entries",
        "misses",
        "name",
        "size",
    )

    def __init__(
        self,
        name: CacheName,
        max_entries: int,
        *,
        max_bytes: int | None = None,
        size: Callable[[V], int] | None = None,
    ) -> None:
        self.name = name
        self.hits = self.misses = self.evictions = 0
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        if (max_bytes is None) != (size is None):
            raise ValueError("a byte budget needs a size function, and the other way round")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.size = size
        self._data: OrderedDict[K, V] = OrderedDict()
        self._sizes: dict[K, int] = {}
        self.bytes = 0
        _LIVE.add(cast("BoundedCache[object, object]", self))

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

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

        A value larger than the whole byte budget is returned without being stored."""
        data = self._data
        if key in data:
            self._drop(key)
        if self.size is not None:
            size = self.size(value)
            assert self.max_bytes is not None
            if size > self.max_bytes:
                self.evictions += 1
                return value
            self._sizes[key] = size
            self.bytes += size
        data[key] = value
        while len(data) > self.max_entries or (
            self.max_bytes is not None and self.bytes > self.max_bytes
        ):
            oldest = next(iter(data))
            self._drop(oldest)
            self.evictions += 1
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
        self.bytes = 0

    def __del__(self) -> None:
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
        size = self._sizes.pop(key, None)
        if size is not None:
            self.bytes -= size


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
