"""Cluster view memory for 10,000 ResourceSlice devices and 5,000 ResourceClaims.

Run: `.venv/bin/pytest tests/benchmarks/test_cluster_memory.py --benchmark-only -s`; the bytes
are printed and kept in the benchmark's extra_info; the time is one `view.replace` (a full list).
"""

from __future__ import annotations

import orjson
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from app.cluster.view import ClusterView, Kind
from tests.cluster.memory import claims_wire, measure, slices_wire

CASES = {
    "10k-devices": (Kind.RESOURCE_SLICE, lambda: slices_wire(10_000), 10_000, "device"),
    "5k-claims": (Kind.RESOURCE_CLAIM, lambda: claims_wire(5_000), 5_000, "claim"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cluster_view_memory(benchmark: BenchmarkFixture, case: str) -> None:
    kind, make_wire, units, unit = CASES[case]
    wire = make_wire()
    cost = measure(kind, wire, units)
    info = {
        "wire_bytes_per_" + unit: round(cost.per_unit(cost.wire_bytes)),
        "decoded_bytes_per_" + unit: round(cost.per_unit(cost.decoded_bytes)),
        "view_bytes_per_" + unit: round(cost.per_unit(cost.view_bytes)),
        "view_mib": round(cost.view_bytes / 2**20, 1),
        "decoded_mib": round(cost.decoded_bytes / 2**20, 1),
    }
    benchmark.extra_info.update(info)
    print(f"\n{case}: {info}")

    def setup() -> tuple[tuple[ClusterView, list[object]], dict[str, object]]:
        return (ClusterView(), [orjson.loads(body) for body in wire]), {}

    benchmark.pedantic(
        lambda view, objs: view.replace(kind, objs), setup=setup, rounds=5, iterations=1
    )
