"""The allocation model's cost: a claim with 2 requests and a constraint against 1,000 GPUs on
125 nodes (8 each, NVIDIA-shaped: counter sets, three products).

Run: `.venv/bin/pytest tests/benchmarks/test_bench_allocation.py --benchmark-only`.

- cold: the claim's shape never seen at this generation (selector matches and the verdict
  computed; the devices are converted and grouped per node already, as they are by the time a
  review arrives);
- inventory: grouping the devices per node again after a slice change;
- warm: the same shape again (a memo lookup).
"""

from __future__ import annotations

from typing import Any

import pytest

from app.allocation import OK, Allocations, ClaimInput, Model
from app.cel.engine import BACKENDS, Engine
from app.cel.factory import get_engine
from app.cluster.view import Kind
from app.devices.index import DeviceIndex
from app.k8s.claims import parse_claim_spec
from tests.allocation.nvidia import CLASSES, DRIVER, allocated_claim, gpu, node_slice

PRODUCTS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S"]
NODES = 125
CLAIM = {
    "devices": {
        "requests": [
            {
                "name": "train",
                "exactly": {
                    "deviceClassName": "gpu.nvidia.com",
                    "count": 4,
                    "selectors": [
                        {
                            "cel": {
                                "expression": f'device.capacity["{DRIVER}"].memory'
                                '.compareTo(quantity("80Gi")) >= 0'
                            }
                        }
                    ],
                },
            },
            {
                "name": "serve",
                "exactly": {
                    "deviceClassName": "gpu.nvidia.com",
                    "count": 2,
                    "selectors": [
                        {
                            "cel": {
                                "expression": f'device.attributes["{DRIVER}"].productName'
                                '.startsWith("NVIDIA H100")'
                            }
                        }
                    ],
                },
            },
        ],
        "constraints": [
            {"requests": ["train", "serve"], "matchAttribute": f"{DRIVER}/productName"}
        ],
    }
}


def fleet() -> dict[str, Any]:
    slices = {}
    for n in range(NODES):
        node = f"node-{n:03d}"
        # the H100 nodes (the only ones that fit the claim) come last: the scan reaches them
        # after 83 nodes that cannot take it
        product = PRODUCTS[len(PRODUCTS) - 1 - n * len(PRODUCTS) // NODES]
        devices = [gpu(node, i, product=product) for i in range(8)]
        found = node_slice(node, 8, devices=devices)
        slices[found["metadata"]["name"]] = found  # keyed as the view keys them: by name
    return slices


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest) -> Engine:
    return get_engine(request.param)


@pytest.fixture(scope="module")
def slices() -> dict[str, Any]:
    return fleet()


def _setup(engine: Engine, slices: dict[str, Any]) -> tuple[DeviceIndex, Model]:
    index = DeviceIndex(engine)
    index.sync(slices, generation=1)
    model = Model(index)
    model.inventory()
    return index, model


CLASS_MAP = {c["metadata"]["name"]: c for c in CLASSES}


def _check(model: Model, allocations: Allocations) -> str:
    verdict = model.check(
        [ClaimInput("claim bench", parse_claim_spec(CLAIM))], CLASS_MAP, allocations
    )
    return verdict.outcome


def test_cold_check_of_2_requests_and_a_constraint_on_1000_devices(
    benchmark: Any, engine: Engine, slices: dict[str, Any]
) -> None:
    index, model = _setup(engine, slices)
    allocations = Allocations()
    assert _check(model, allocations) == OK

    def setup() -> tuple[tuple[Model, Allocations], dict[str, Any]]:
        index._memo.clear()  # a shape never seen at this generation
        return (Model(index), allocations), {}

    def cold(fresh: Model, held: Allocations) -> str:
        fresh._inventory = model._inventory  # grouped already (built per slice change)
        return _check(fresh, held)

    assert benchmark.pedantic(cold, setup=setup, rounds=200, iterations=1) == OK


def test_regrouping_1000_devices_per_node_after_a_slice_change(
    benchmark: Any, engine: Engine, slices: dict[str, Any]
) -> None:
    """What the first review after a slice change pays: the other 124 slices were read
    already, the devices are grouped per node again."""
    _, model = _setup(engine, slices)

    def regroup() -> None:
        model._inventory = None
        model.inventory()

    benchmark.pedantic(regroup, rounds=50, iterations=1)


def test_reading_1000_devices_for_the_first_time(
    benchmark: Any, engine: Engine, slices: dict[str, Any]
) -> None:
    """Startup: every slice read (taints, counters, capacities) and grouped."""
    index, _ = _setup(engine, slices)
    benchmark.pedantic(lambda: Model(index).inventory(), rounds=10, iterations=1)


def test_warm_check_is_a_lookup(benchmark: Any, engine: Engine, slices: dict[str, Any]) -> None:
    _, model = _setup(engine, slices)
    allocations = Allocations()
    _check(model, allocations)
    assert benchmark(_check, model, allocations) == OK


# -- consumable capacity: shares of 1,000 GPUs ---------------------------------------------------

SHARE = {
    "devices": {
        "requests": [
            {
                "name": "share",
                "exactly": {
                    "deviceClassName": "gpu.nvidia.com",
                    "count": 1,
                    "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
                    # rounded up to 30Gi by the devices' validRange step
                    "capacity": {"requests": {"memory": "30000Mi"}},
                },
            }
        ]
    }
}


def shared_fleet() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """1,000 shareable 80Gi GPUs on 125 nodes (validRange 1Gi..80Gi, step 1Gi), and a claim
    holding a 60Gi share of every GPU on the first 100 nodes: only the last 25 nodes can give
    30Gi more, and the scan reaches them last."""
    slices, claims = {}, []
    for n in range(NODES):
        node = f"node-{n:03d}"
        devices = [
            gpu(
                node,
                i,
                allowMultipleAllocations=True,
                capacity={
                    "memory": {
                        "value": "80Gi",
                        "requestPolicy": {
                            "default": "80Gi",
                            "validRange": {"min": "1Gi", "max": "80Gi", "step": "1Gi"},
                        },
                    }
                },
            )
            for i in range(8)
        ]
        found = node_slice(node, 8, devices=devices)
        slices[found["metadata"]["name"]] = found
        if n < 100:
            share = {"consumedCapacity": {"memory": "60Gi"}, "shareID": f"s-{n}"}
            held = [(node, f"gpu-{i}") for i in range(8)]
            claims.append(allocated_claim(f"held-{n}", *held, **share))
    return slices, claims


def test_cold_capacity_check_of_a_share_on_1000_devices(benchmark: Any, engine: Engine) -> None:
    slices, held = shared_fleet()
    index, model = _setup(engine, slices)
    allocations = Allocations()
    for claim in held:
        allocations.on_change(Kind.RESOURCE_CLAIM, None, claim)

    def check(fresh: Model) -> str:
        verdict = fresh.check(
            [ClaimInput("claim share", parse_claim_spec(SHARE))], CLASS_MAP, allocations
        )
        return verdict.outcome

    assert check(model) == OK

    def setup() -> tuple[tuple[Model], dict[str, Any]]:
        index._memo.clear()  # a shape never seen at this generation
        fresh = Model(index)
        fresh._inventory = model._inventory  # grouped already (built when the slices change)
        return (fresh,), {}

    assert benchmark.pedantic(check, setup=setup, rounds=200, iterations=1) == OK
