"""The one bounded cache: LRU by entries and by bytes, counted, and exported in /metrics."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from app.bounded import (
    DEFAULT_MAX_BYTES,
    SHARES,
    BoundedCache,
    CacheName,
    approx_bytes,
    budget,
    cache_stats,
    live_caches,
    memoized,
    set_budget,
)
from app.cel.cost import MEMO_TEXT_PER_REVIEW
from app.config.settings import Settings
from app.metrics import Metrics
from tests.helpers import AppHarness, Obj, policy_from, review

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


KEY = approx_bytes("a")
"""What a one-character key counts for: keys are counted with their values."""


def test_entries_are_evicted_oldest_first_until_the_bytes_fit_the_budget() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(NAME, 100, max_bytes=2 * KEY + 10, size=len)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    assert cache.bytes == 2 * KEY + 8
    cache.put("c", b"123456")
    assert list(cache) == ["b", "c"]
    assert cache.bytes == 2 * KEY + 10
    assert cache.evictions == 1


def test_a_value_over_the_whole_byte_budget_is_returned_but_not_kept() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(NAME, 100, max_bytes=KEY + 10, size=len)
    cache.put("a", b"1")
    assert cache.put("b", b"x" * 11) == b"x" * 11
    assert "b" not in cache
    assert list(cache) == ["a"]
    assert cache.bytes == KEY + 1


def test_replacing_pop_and_clear_keep_the_byte_count_right_and_are_not_evictions() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(NAME, 100, max_bytes=1000, size=len)
    cache.put("a", b"12345")
    cache.put("a", b"12")
    assert cache.bytes == KEY + 2
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


@pytest.mark.parametrize(("max_entries", "max_bytes"), [(0, None), (1, 0)])
def test_bounds_must_be_usable(max_entries: int, max_bytes: int | None) -> None:
    with pytest.raises(ValueError):
        BoundedCache(NAME, max_entries, max_bytes=max_bytes)


def test_the_shares_split_the_one_budget_and_every_cache_name_has_one() -> None:
    assert set(SHARES) == set(CacheName)
    assert sum(SHARES.values()) == pytest.approx(1.0)
    assert sum(budget().values()) <= DEFAULT_MAX_BYTES


def test_caches_of_one_name_share_its_share_and_the_putting_one_gives_way() -> None:
    name = CacheName.QUOTA_LIMITS
    gc.collect()
    others = cache_stats().get(name)
    share = budget()[name] - (others.bytes if others else 0)  # (other tests' caches)
    first: BoundedCache[str, bytes] = BoundedCache(name, 10_000, size=len)
    second: BoundedCache[str, bytes] = BoundedCache(name, 10_000, size=len)
    puts = share // 10_000 + 10
    for i in range(puts):
        first.put(f"a{i}", b"x" * 10_000)
    held = first.bytes
    assert share - 10_100 < held <= share
    for i in range(puts):
        second.put(f"b{i}", b"x" * 10_000)
    assert first.bytes == held  # the second evicted its own, never the first's
    assert first.bytes + second.bytes <= share
    assert second.evictions >= puts - 1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(CacheName)),
            st.text(max_size=300),
            st.integers(min_value=0, max_value=6000),
        ),
        max_size=300,
    )
)
def test_the_sum_of_every_cache_s_bytes_never_passes_the_budget(
    puts: list[tuple[CacheName, str, int]],
) -> None:
    total = 64 * 1024
    set_budget(total)
    try:
        caches = {name: BoundedCache[str, bytes](name, 100_000, size=len) for name in CacheName}
        before = sum(s.bytes for s in cache_stats().values())
        for name, key, size in puts:
            caches[name].put(key, b"x" * size)
            held = sum(c.bytes for c in caches.values())
            assert held <= total
            assert sum(s.bytes for s in cache_stats().values()) - before == held
    finally:
        set_budget(DEFAULT_MAX_BYTES)


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


def _claim_review(selectors: list[str], uid: str) -> Obj:
    body = review("resourceclaim-create", uid=uid)
    request = body["request"]["object"]["spec"]["devices"]["requests"][0]["exactly"]
    request["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return body


def _long_selectors(count: int, tag: str) -> list[str]:
    """Distinct selectors of ~10 KB each (the API server's limit is 10 KiB)."""
    return [
        f'device.attributes["gpu.example.com"].model == "{tag}-{i}-{"x" * 10_000}"'
        for i in range(count)
    ]


LARGE_COMPILES = "cel: {compileBudget: {bytes: 1048576, milliseconds: 600000}}"
"""A compile budget that lets a review compile past the memo bound (the default stops it at
the memo bound's 64 KiB of text, and at 50 ms)."""


def test_a_review_over_the_memo_bound_is_answered_alike_but_leaves_nothing_in_the_caches(
    make_app: Callable[..., AppHarness],
) -> None:
    app = make_app(policy=policy_from(LARGE_COMPILES))

    def entries() -> dict[CacheName, int]:
        return {name: stats.entries for name, stats in cache_stats().items()}

    over = _long_selectors(MEMO_TEXT_PER_REVIEW // 10_000 + 1, "over")
    before = entries()
    answer = app.answer("validate", _claim_review(over, "over"))
    assert answer["allowed"] is True, answer
    after = entries()
    for name in (
        CacheName.CEL_COMPILE,
        CacheName.CEL_DEVICE_MATCH,
        CacheName.CEL_DEVICE_PATHS,
        CacheName.SATISFIABILITY_VERDICTS,
    ):
        assert after.get(name, 0) == before.get(name, 0), name
    # the same selectors, fewer of them, under the bound: kept
    under = over[: MEMO_TEXT_PER_REVIEW // 10_100]
    again = app.answer("validate", _claim_review(under, "under"))
    assert again["allowed"] is True, again
    assert entries()[CacheName.CEL_COMPILE] == after[CacheName.CEL_COMPILE] + len(under)
    # and a bad selector over the bound is still denied with its path
    bad = app.answer("validate", _claim_review([*over, "device.nope("], "bad"))
    assert bad["allowed"] is False
    assert "selectors[" in bad["status"]["message"], bad
