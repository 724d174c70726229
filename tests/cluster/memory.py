"""Measuring what the cluster view holds in memory, with tracemalloc."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from app.cluster.view import ClusterView, Kind
from tests.cluster import objects


def retained_bytes(build: Callable[[], object]) -> int:
    """Bytes still allocated after `build()` returns, while its result is alive."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return after - before


@dataclass(frozen=True)
class Cost:
    units: int
    wire_bytes: int
    decoded_bytes: int
    """The decoded objects as the API server sent them (what a cache without slimming holds)."""
    view_bytes: int
    """The same objects held by the ClusterView (slimmed, shared values, indexes)."""

    def per_unit(self, total: int) -> float:
        return total / self.units


def measure(kind: Kind, wire: list[bytes], units: int) -> Cost:
    def decoded() -> list[object]:
        return [orjson.loads(body) for body in wire]

    def view() -> ClusterView:
        held = ClusterView()
        held.replace(kind, [orjson.loads(body) for body in wire])
        return held

    return Cost(units, sum(map(len, wire)), retained_bytes(decoded), retained_bytes(view))


def slices_wire(devices: int, per_slice: int = 8) -> list[bytes]:
    """`devices` GPUs on 8-GPU nodes, one ResourceSlice per node, as JSON from the wire."""
    return [orjson.dumps(objects.served_slice(i, per_slice)) for i in range(devices // per_slice)]


def claims_wire(claims: int) -> list[bytes]:
    return [orjson.dumps(objects.served_claim(i)) for i in range(claims)]
