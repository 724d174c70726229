"""The one bounded cache: LRU by entries and by bytes, counted, and exported in /metrics."""

from __future__ import annotations

import gc

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.bounded import (
    DEFAULT_MAX_BYTES,
    BoundedCache,
    CacheName,
    cache_stats,
    live_caches,
    memoized,
)
from app.config.settings import Settings
from app.metrics import Metrics
from tests.conftest import AppHarness, review

NAME = CacheName.QUANTITIES


def test_the_least_recently_used_entry_is_evicted_when_the_count_is_reached() -> None:
    cache: BoundedCache[str, int] = BoundedCache(NAME, 2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recently used
    cache.put("c", 3)
    assert "b" not in cache
    assert list(cache) == ["a", "c"]
    assert cache.evictions == 1
    assert len(cache) == 2


def test_entries_are_evicted_oldest_first_until_the_bytes_fit_the_budget() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(NAME, 100, max_bytes=10, size=len)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    assert cache.bytes == 8
    cache.put("c", b"123456")
    assert list(cache) == ["b", "c"]
    assert cache.bytes == 10
    assert cache.evictions == 1


def test_a_value_over_the_whole_byte_budget_is_returned_but_not_kept() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(NAME, 100, max_bytes=10, size=len)
    cache.put("small", b"1")
    assert cache.put("huge", b"x" * 11) == b"x" * 11
    assert "huge" not in cache
    assert list(cache) == ["small"]
    assert cache.bytes == 1


def test_replacing_pop_and_clear_keep_the_byte_count_right_and_are_not_evictions() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(NAME, 100, max_bytes=100, size=len)
    cache.put("a", b"12345")
    cache.put("a", b"12")
    assert cache.bytes == 2
    assert cache.pop("a") == b"12"
    assert cache.pop("a") is None
    cache.put("b", b"123")
    cache.clear()
    assert (len(cache), cache.bytes, cache.evictions) == (0, 0, 0)


def test_hits_and_misses_are_counted_and_peek_counts_nothing() -> None:
    cache: BoundedCache[str, int] = BoundedCache(NAME, 4)
    assert cache.get("a") is None
    assert cache.get("a", -1) == -1
    cache.put("a", 1)
    assert cache.get("a") == 1
    assert cache.peek("a") == 1
    assert (cache.hits, cache.misses) == (1, 2)


@pytest.mark.parametrize(
    ("max_entries", "max_bytes", "with_size"), [(0, None, False), (1, 10, False), (1, None, True)]
)
def test_bounds_must_be_usable(max_entries: int, max_bytes: int | None, with_size: bool) -> None:
    with pytest.raises(ValueError):
        BoundedCache(NAME, max_entries, max_bytes=max_bytes, size=len if with_size else None)


def test_memoized_caches_results_but_not_exceptions_and_evicts_by_count() -> None:
    calls: list[str] = []

    @memoized(NAME, 2)
    def parse(text: str) -> int:
        calls.append(text)
        return int(text)

    assert parse("1") == parse("1") == 1
    with pytest.raises(ValueError):
        parse("x")
    with pytest.raises(ValueError):
        parse("x")
    parse("2")
    parse("3")
    parse("1")
    assert calls == ["1", "x", "x", "2", "3", "1"]
    cache = parse.cache  # type: ignore[attr-defined]
    assert cache.evictions == 2
    assert cache.hits == 1


def test_counters_of_a_cache_that_is_gone_are_kept_so_they_never_go_down() -> None:
    name = CacheName.QUOTA_LIMITS
    cache: BoundedCache[str, int] = BoundedCache(name, 1)
    cache.get("a")
    cache.put("a", 1)
    cache.put("b", 2)
    before = cache_stats()[name]
    del cache
    gc.collect()
    after = cache_stats()[name]
    assert after.misses >= before.misses
    assert after.evictions >= before.evictions


def test_the_byte_budget_is_a_setting_with_a_documented_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().cache_max_bytes == DEFAULT_MAX_BYTES == 128 * 1024 * 1024
    monkeypatch.setenv("DRA_WEBHOOK_CACHE_MAX_BYTES", str(64 * 1024 * 1024))
    assert Settings().cache_max_bytes == 64 * 1024 * 1024


def _samples(text: str, family: str) -> dict[str, float]:
    for metric in text_string_to_metric_families(text):
        if metric.name == family:
            return {
                s.labels["cache"]: s.value
                for s in metric.samples
                if s.name.endswith(("_total", family))
            }
    raise AssertionError(f"{family} not in /metrics")


def test_every_cache_is_in_metrics_under_one_family_per_counter_by_a_closed_name() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(
        CacheName.CEL_DEVICE_MATCH, 1, max_bytes=1024, size=len
    )
    cache.get("a")
    cache.put("a", b"12345")
    cache.put("b", b"123")
    text = Metrics().render().decode()
    names = {name.value for name in CacheName}
    for family in ("hits", "misses", "evictions", "entries", "bytes"):
        samples = _samples(text, f"dra_webhook_cache_{family}")
        assert set(samples) == names, family
    match = CacheName.CEL_DEVICE_MATCH.value
    assert _samples(text, "dra_webhook_cache_misses")[match] >= 1
    assert _samples(text, "dra_webhook_cache_evictions")[match] >= 1
    assert _samples(text, "dra_webhook_cache_bytes")[match] >= 3
    assert cache in live_caches()


def test_a_served_review_shows_in_the_caches_of_metrics(app: AppHarness) -> None:
    app.answer("validate", review("pod-create-legacy-gpu"))
    app.answer("validate", review("pod-create-legacy-gpu", uid="second"))
    text = app.client.get("/metrics").text
    assert _samples(text, "dra_webhook_cache_hits")[CacheName.DRA_ONLY_ANSWERS.value] >= 1
    assert _samples(text, "dra_webhook_cache_entries")[CacheName.DRA_ONLY_ANSWERS.value] >= 1
