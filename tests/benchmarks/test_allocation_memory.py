"""Memory per device of what the satisfiability check holds: the cluster view, the device
index (CEL values), and the allocation model's per-node grouping (slice facts, candidates).

Run: `.venv/bin/pytest tests/benchmarks/test_allocation_memory.py --benchmark-only -s`; the bytes
are printed and kept in the benchmark's extra_info; the time is one regrouping of the devices.
"before" is the view and the index (what the cluster-wide count used), "after" adds the
allocation model; the growth is after / before - 1.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from app.allocation import Model
from app.cel.factory import get_engine
from app.cluster.view import ClusterView, Kind
from app.devices.index import DeviceIndex
from tests.allocation.nvidia import node_slice
from tests.cluster.memory import retained_bytes, slices_wire

DEVICES = 10_000


def _nvidia_wire() -> list[bytes]:
    """8-GPU nodes as the NVIDIA driver publishes them: a counter set of 9 counters per GPU."""
    return [
        orjson.dumps(
            node_slice(f"node-{n:05d}", 8)
            | {"metadata": {"name": f"n{n}", "uid": str(n), "resourceVersion": "1"}}
        )
        for n in range(DEVICES // 8)
    ]


CASES = {"plain": lambda: slices_wire(DEVICES), "nvidia-counters": _nvidia_wire}


@pytest.mark.parametrize("case", list(CASES))
def test_allocation_model_memory_per_device(benchmark: BenchmarkFixture, case: str) -> None:
    wire = CASES[case]()
    engine = get_engine("cel-expr-python")

    def view_only() -> ClusterView:
        view = ClusterView()
        view.replace(Kind.RESOURCE_SLICE, [orjson.loads(b) for b in wire])
        return view

    def with_index() -> tuple[ClusterView, DeviceIndex]:
        view = view_only()
        index = DeviceIndex(engine)
        view.subscribe(index.on_change)
        return view, index

    def with_model() -> tuple[Any, Model]:
        held = with_index()
        model = Model(held[1])
        model.inventory()
        return held, model

    view = retained_bytes(view_only) / DEVICES
    before = retained_bytes(with_index) / DEVICES
    after = retained_bytes(with_model) / DEVICES
    info = {
        "view_bytes_per_device": round(view),
        "view_and_index_bytes_per_device": round(before),
        "with_allocation_model_bytes_per_device": round(after),
        "growth": round(after / before - 1, 3),
    }
    benchmark.extra_info.update(info)
    print(f"\n{case}: {info}")
    _, model = with_model()

    def regroup() -> None:
        model._inventory = None
        model.inventory()

    benchmark.pedantic(regroup, rounds=3, iterations=1)
