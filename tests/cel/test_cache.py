"""The precompile cache: one compile per key, errors cached, bounded, counted."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from app.bounded import approx_bytes
from app.cel.cache import PROGRAM_BYTES, CompileCache
from app.cel.cost import Budget, BudgetExceededError
from app.cel.device import Device
from app.cel.engine import ADMISSION, SELECTOR, Engine, Environment, Program
from app.cel.errors import CelCompileError
from app.cel.factory import get_engine
from app.config.policy import CompileBudget


class SlowCountingEngine(Engine):
    """Wraps a real engine, counts compiles, and makes each compile slow enough to overlap."""

    checks_types = True

    def __init__(self, inner: Engine, delay: float = 0.05) -> None:
        self.inner = inner
        self.name = inner.name
        self.delay = delay
        self.compiles = 0
        self._lock = threading.Lock()

    def compile(self, expression: str, environment: Environment) -> Program:
        with self._lock:
            self.compiles += 1
        time.sleep(self.delay)
        return self.inner.compile(expression, environment)

    def activation(self, environment: Environment, variables: Mapping[str, Any]) -> Any:
        return self.inner.activation(environment, variables)

    def device_activation(self, device: Device) -> Any:
        return self.inner.device_activation(device)


class BusyEngine(SlowCountingEngine):
    """Spends `cpu` seconds of CPU time in each compile (a sleep would not count)."""

    def __init__(self, inner: Engine, cpu: float) -> None:
        super().__init__(inner, delay=0)
        self.cpu = cpu

    def compile(self, expression: str, environment: Environment) -> Program:
        until = time.thread_time() + self.cpu
        while time.thread_time() < until:
            pass
        return super().compile(expression, environment)


def test_a_miss_for_a_review_asks_its_budget_first_and_caches_nothing_it_refuses() -> None:
    engine = SlowCountingEngine(get_engine(), delay=0)
    cache = CompileCache()
    budget = Budget(10**9, CompileBudget(expressions=2))
    cache.get(engine, "1 < 2", ADMISSION, budget)
    cache.get(engine, "1 < 3", ADMISSION, budget)
    with pytest.raises(BudgetExceededError, match=r"\(cel.compileBudget.expressions\)"):
        cache.get(engine, "1 < 4", ADMISSION, budget)
    assert not cache.is_cached(engine, "1 < 4", ADMISSION)
    cache.get(engine, "1 < 2", ADMISSION, budget)  # a hit costs the budget nothing
    assert (engine.compiles, budget.compiled) == (2, 2)
    cache.get(engine, "1 < 4", ADMISSION)  # (a lookup for no review is not bounded)


def test_a_reviews_new_compiles_stop_once_their_cpu_time_is_spent() -> None:
    engine = BusyEngine(get_engine(), cpu=0.004)
    cache = CompileCache()
    budget = Budget(10**9, CompileBudget(expressions=1000, milliseconds=10))
    with pytest.raises(BudgetExceededError, match=r"10 ms of CEL compiling"):
        for number in range(100):
            cache.get(engine, f"1 < {number}", ADMISSION, budget)
    # each bound is checked before a compile: the last one may end past it
    assert 2 <= engine.compiles <= 3
    assert budget.compile_seconds >= 0.010


def test_second_lookup_is_a_hit_and_returns_the_same_program(engine: Engine) -> None:
    cache = CompileCache()
    first = cache.get(engine, 'device.driver == "a"', SELECTOR)
    second = cache.get(engine, 'device.driver == "a"', SELECTOR)
    assert first is second
    assert (cache.hits, cache.misses, cache.size) == (1, 1, 1)


def test_same_text_in_another_environment_or_backend_is_another_key() -> None:
    cache = CompileCache()
    cache.get(get_engine("cel-expr-python"), "true", SELECTOR)
    cache.get(get_engine("cel-expr-python"), "true", ADMISSION)
    cache.get(get_engine("cel-python"), "true", SELECTOR)
    assert cache.misses == 3 and cache.size == 3


def test_concurrent_lookups_of_a_new_expression_compile_it_once() -> None:
    engine = SlowCountingEngine(get_engine())
    cache = CompileCache()
    results: list[Program] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get(engine, "1 < 2", ADMISSION)))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert engine.compiles == 1
    assert len({id(p) for p in results}) == 1
    assert (cache.hits, cache.misses) == (7, 1)


def test_compile_errors_are_cached_too() -> None:
    engine = SlowCountingEngine(get_engine(), delay=0)
    cache = CompileCache()
    for _ in range(3):
        with pytest.raises(CelCompileError) as caught:
            cache.get(engine, "device.driver ==", SELECTOR)
        assert caught.value.line == 1
    assert engine.compiles == 1
    assert cache.stats().compile_errors == 1


def test_least_recently_used_entry_is_evicted_at_the_bound() -> None:
    engine = SlowCountingEngine(get_engine(), delay=0)
    cache = CompileCache(max_size=2)
    cache.get(engine, "1 == 1", ADMISSION)
    cache.get(engine, "2 == 2", ADMISSION)
    cache.get(engine, "1 == 1", ADMISSION)  # refresh: "2 == 2" is now the oldest
    cache.get(engine, "3 == 3", ADMISSION)
    assert cache.size == 2 and cache.evictions == 1
    cache.get(engine, "1 == 1", ADMISSION)
    assert engine.compiles == 3
    cache.get(engine, "2 == 2", ADMISSION)
    assert engine.compiles == 4


def test_cache_refuses_a_zero_bound() -> None:
    with pytest.raises(ValueError):
        CompileCache(max_size=0)


def test_programs_are_also_bounded_by_the_bytes_they_hold() -> None:
    engine = get_engine("cel-python")  # ~0.5 KB per character of a compiled expression
    long = " || ".join(f'device.attributes["example.com"].v == "{i}"' for i in range(20))
    expression = f"{long} || 0 == 0"
    program = PROGRAM_BYTES["cel-python"][0] + PROGRAM_BYTES["cel-python"][1] * len(expression)
    one = program + approx_bytes(("cel-python", SELECTOR.name, expression))  # (its key counts)
    cache = CompileCache(max_size=100, max_bytes=3 * one)
    for i in range(6):
        cache.get(engine, f"{long} || {i} == 0", SELECTOR)
    assert cache.size == 3 and cache.evictions == 3
    assert cache._entries.bytes <= 3 * one
