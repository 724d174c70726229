"""The precompile cache: each distinct expression compiles once per backend and environment.

Like ``k8s.io/dynamic-resource-allocation/cel/cache.go``: a bounded LRU keyed by backend +
environment + expression text, where concurrent requests for a key that is still compiling wait
for that one compile instead of starting their own, and a failed compile is cached as well (a bad
selector in a popular template costs one compile, not one per request). The LRU is the app's one
bounded cache (`app.bounded`, named `cel-compile` in /metrics), under this cache's lock; this
module imports no metrics library.

A lookup made for a review carries its :class:`~app.cel.cost.Budget`: a miss asks it first
(`Budget.before_compile`, which raises once the review's new compiles are spent, before anything
is cached) and the compile's CPU time is counted to it; a hit costs it nothing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Final, cast

from app.bounded import BoundedCache, CacheName
from app.cel.cost import MAX_SELECTOR_COST, MAX_SELECTOR_LENGTH, Budget, estimate
from app.cel.engine import Engine, Environment, Program
from app.cel.errors import CelCompileError

__all__ = ["CacheStats", "CompileCache"]

DEFAULT_MAX_SIZE: Final = 4096


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A consistent snapshot of the counters."""

    hits: int
    misses: int
    size: int
    evictions: int
    compile_errors: int


PROGRAM_BYTES: Final = {"cel-expr-python": (4 * 1024, 48), "cel-python": (48 * 1024, 512)}
"""Per backend: about what a compiled program holds, fixed and per character of its expression
(measured on 300 programs of 55 and 1,186 characters: 2.4 and 48 KiB with cel-expr-python,
45 and 533 KiB with cel-python)."""


class _Entry:
    __slots__ = ("done", "error", "program", "size")

    def __init__(self, size: int = 0) -> None:
        self.size = size
        """About the bytes its program holds (:data:`PROGRAM_BYTES`)."""
        self.done = threading.Event()
        self.program: Program | None = None
        self.error: CelCompileError | None = None


class CompileCache:
    """Thread-safe bounded LRU of compiled programs (and compile errors)."""

    def __init__(self, max_size: int = DEFAULT_MAX_SIZE, max_bytes: int | None = None) -> None:
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        self._max_size = max_size
        self._entries: BoundedCache[tuple[str, str, str], _Entry] = BoundedCache(
            CacheName.CEL_COMPILE, max_size, max_bytes=max_bytes, size=_entry_bytes
        )
        self._lock = threading.Lock()
        self.compile_errors = 0

    @property
    def size(self) -> int:
        return len(self._entries)

    @property
    def hits(self) -> int:
        return self._entries.hits

    @property
    def misses(self) -> int:
        return self._entries.misses

    @property
    def evictions(self) -> int:
        return self._entries.evictions

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                self.hits, self.misses, len(self._entries), self.evictions, self.compile_errors
            )

    def is_cached(
        self,
        engine: Engine,
        expression: str,
        environment: Environment,
        budget: Budget | None = None,
    ) -> bool:
        """Whether a lookup would be a hit (no compile), here or in ``budget.scratch``."""
        key = (engine.name, environment.name, expression)
        return key in self._entries or (budget is not None and key in budget.scratch)

    def get(
        self,
        engine: Engine,
        expression: str,
        environment: Environment,
        budget: Budget | None = None,
    ) -> Program:
        """The compiled program; raises the (cached) :class:`CelCompileError`.

        A device selector is held to Kubernetes' limits (10 KiB, estimated cost 1,000,000) and
        carries its estimated cost (`program.cost`), computed once here with the compile.
        For a review that may not memoize (``budget.memoize`` false: over
        :data:`app.cel.cost.MEMO_TEXT_PER_REVIEW`) a miss is kept in the review's own
        ``budget.scratch``, not here. A miss first asks ``budget`` whether the review may
        compile one more (raising its BudgetExceededError, nothing cached) and counts its CPU
        time to it.
        """
        # Environment names are unique; hashing the name is cheaper than the dataclass.
        key = (engine.name, environment.name, expression)
        keep = budget is None or budget.memoize
        with self._lock:
            entry = self._entries.get(key)
            if entry is None and not keep:
                assert budget is not None
                entry = cast("_Entry | None", budget.scratch.get(key))
            owner = entry is None
            if entry is None:
                if budget is not None:
                    budget.before_compile()
                entry = _Entry(_program_bytes(engine.name, expression))
                if keep:
                    self._entries.put(key, entry)
                else:
                    assert budget is not None
                    budget.scratch[key] = entry
        if owner:
            if budget is None:
                self._compile(entry, engine, expression, environment)
            else:
                started = time.thread_time()
                try:
                    self._compile(entry, engine, expression, environment)
                finally:
                    budget.count_compile(time.thread_time() - started)
        elif not entry.done.is_set():
            entry.done.wait()
        if entry.program is not None:
            return entry.program
        assert entry.error is not None
        raise entry.error.with_traceback(None)

    def _compile(
        self, entry: _Entry, engine: Engine, expression: str, environment: Environment
    ) -> None:
        try:
            if environment.device and len(expression) > MAX_SELECTOR_LENGTH:
                raise CelCompileError(
                    expression,
                    f"expression is {len(expression):,} characters long, over the limit of "
                    f"{MAX_SELECTOR_LENGTH:,}",
                )
            program = engine.compile(expression, environment)
            if environment.device:
                cost = estimate(expression)
                if cost > MAX_SELECTOR_COST:
                    raise CelCompileError(
                        expression,
                        f"estimated cost {cost:,} exceeds the limit of {MAX_SELECTOR_COST:,} "
                        "(as the API server's for a DRA selector)",
                    )
                program.cost = max(1, cost)
            entry.program = program
        except CelCompileError as error:
            entry.error = error
            with self._lock:
                self.compile_errors += 1
        except BaseException:
            # Not a verdict on the expression (e.g. an interrupt): let a later call retry.
            with self._lock:
                key = (engine.name, environment.name, expression)
                if self._entries.peek(key) is entry:
                    self._entries.pop(key)
            entry.error = CelCompileError(expression, "compilation was interrupted")
            raise
        finally:
            entry.done.set()


def _program_bytes(backend: str, expression: str) -> int:
    fixed, per_character = PROGRAM_BYTES.get(backend, PROGRAM_BYTES["cel-python"])
    return fixed + per_character * len(expression)


def _entry_bytes(entry: _Entry) -> int:
    return entry.size
