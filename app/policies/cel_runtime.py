"""The CEL engine, compile cache and device index the CEL policies share, built once.

Built once per pipeline at load (`cel_runtime`, the builder the CEL checks' registrations
declare); the cache and the device index count their hits, misses and evictions for /metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.allocation import Model
from app.bounded import DEFAULT_MAX_BYTES
from app.cel.cache import CompileCache
from app.cel.engine import SELECTOR, Engine
from app.cel.factory import get_engine
from app.cel.index import DeviceIndex
from app.config import Policy
from app.policies.parts import Parts


@dataclass(frozen=True, slots=True)
class CelRuntime:
    engine: Engine
    cache: CompileCache
    index: DeviceIndex
    model: Model
    """The allocation model over ``index`` (its verdict memo lives as long as the runtime)."""

    @classmethod
    def build(cls, policy: Policy, cache_max_bytes: int = DEFAULT_MAX_BYTES) -> CelRuntime:
        engine = get_engine(policy.cel.backend)
        # Build the backend's selector environment now (~0.1 s), not on the first claim.
        engine.compile("true", SELECTOR)
        cache = CompileCache(policy.cel.cache_size, max_bytes=cache_max_bytes)
        index = DeviceIndex(engine, cache, cache_max_bytes)
        return cls(
            engine=engine, cache=cache, index=index, model=Model(index, max_bytes=cache_max_bytes)
        )


def cel_runtime(parts: Parts) -> CelRuntime:
    """Builder: the one CEL runtime of a pipeline (selectors, admin rules, default selectors)."""
    return CelRuntime.build(parts.policy, parts.cache_max_bytes)
