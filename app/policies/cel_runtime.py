"""The CEL engine, compile cache, device index and allocation model the CEL policies share.

Built once per pipeline at load (`cel_runtime`, the builder the CEL checks' registrations
declare); the cache and the device index count their hits, misses and evictions for /metrics, and
hold their bytes within their shares of the process budget (app.bounded).

The device index and the allocation model follow the cluster view's ResourceSlices: the runtime
is a part that follows the view (`parts.FollowsView`), so the pipeline subscribes its listeners
at load and warms it when the view has synced, as it does any such part. Nothing here is
brought up to date on a request.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.allocation import Model
from app.cel.cache import CompileCache
from app.cel.engine import SELECTOR, Engine
from app.cel.factory import get_engine
from app.cluster.view import ClusterReader, Listener
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

    def listeners(self) -> tuple[Listener, ...]:
        """The device index's, then the model's: the model reads the index's slices."""
        return (self.index.on_change, self.model.on_change)

    def synced(self, view: ClusterReader) -> None:
        """Build what a first claim would (devices per node, each class's matches), before
        the view reports synced and /readyz turns true."""
        self.model.warm(view.device_classes())


def cel_runtime(parts: Parts) -> CelRuntime:
    """Builder: the one CEL runtime of a pipeline (selectors, admin rules, default selectors)."""
    return CelRuntime.build(parts.policy)
