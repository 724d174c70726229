"""The CEL engine, compile cache and device index the CEL policies share, built once.

Built once per pipeline at load (`cel_runtime`, the builder the CEL checks' registrations
declare); the cache and the device index count their hits, misses and evictions for /metrics, and
hold their bytes within their shares of the process budget (app.bounded).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.allocation import Model
from app.cel.cache import CompileCache
from app.cel.engine import SELECTOR, Engine
from app.cel.factory import get_engine
from app.config import Policy
from app.devices.index import DeviceIndex
from app.policies.parts import Parts


@dataclass(frozen=True, slots=True)
class CelRuntime:
    engine: Engine
    cache: CompileCache
    index: DeviceIndex
    model: Model
    """The allocation model over ``index`` (its verdict memo lives as long as the runtime)."""

    @classmethod
    def build(cls, policy: Policy) -> CelRuntime:
        engine = get_engine(policy.cel.backend)
        # Build the backend's selector environment now (~0.1 s), not on the first claim.
        engine.compile("true", SELECTOR)
        cache = CompileCache(policy.cel.cache_size)
        index = DeviceIndex(engine, cache)
        return cls(engine=engine, cache=cache, index=index, model=Model(index))


def cel_runtime(parts: Parts) -> CelRuntime:
    """Builder: the one CEL runtime of a pipeline (selectors, admin rules, default selectors)."""
    return CelRuntime.build(parts.policy)
