"""CEL micro-benchmarks (run: ``pytest tests/benchmarks --benchmark-only``).

Targets (DESIGN "Performance targets", default backend): compiled-cache hit <= 1 us, evaluation
<= 5 us per expression, satisfiability of a class + selectors against 1,000 devices <= 2 ms cold
and <= 20 us warm. Results are written down in docs/benchmarks.md.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from app.cel.cache import CompileCache
from app.cel.device import devices_of_slice
from app.cel.engine import BACKENDS, SELECTOR, Engine
from app.cel.factory import get_engine
from app.devices.index import DeviceIndex
from tests.benchmarks.policies import THREE_RULES

CLASS = ('device.driver == "gpu.nvidia.com"',)
MEMORY = 'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gi"))'
MODEL = 'device.attributes["gpu.nvidia.com"].model == "H100"'
PER_DEVICE = 'device.attributes["gpu.nvidia.com"].uuid.startsWith("GPU-")'


def cluster(devices: int = 1000, per_slice: int = 8) -> dict[str, Any]:
    """``devices`` GPUs, 8 per node, each with its own uuid; half H100 80Gi, half A100 40Gi."""
    slices = {}
    for node in range(devices // per_slice):
        entries = []
        for i in range(per_slice):
            n = node * per_slice + i
            entries.append(
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "model": {"string": "H100" if n % 2 else "A100"},
                        "uuid": {"string": f"GPU-{n:08x}"},
                        "index": {"int": i},
                        "driverVersion": {"version": "550.54.15"},
                    },
                    "capacity": {"memory": {"value": "80Gi" if n % 2 else "40Gi"}},
                }
            )
        name = f"node-{node}-gpu.nvidia.com"
        slices[name] = {
            "metadata": {"name": name, "resourceVersion": "1"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": f"node-{node}",
                "pool": {"name": f"node-{node}", "generation": 1, "resourceSliceCount": 1},
                "devices": entries,
            },
        }
    return slices


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest) -> Engine:
    return get_engine(request.param)


@pytest.fixture(scope="module")
def slices() -> dict[str, Any]:
    return cluster()


def test_compile_a_selector(benchmark: Any, engine: Engine) -> None:
    counter = itertools.count()

    def compile_new() -> None:
        # A fresh literal each round, so nothing inside the backend can cache it.
        engine.compile(MEMORY.replace("40Gi", f"{next(counter)}Mi"), SELECTOR)

    benchmark(compile_new)


def test_cached_lookup(benchmark: Any, engine: Engine) -> None:
    cache = CompileCache()
    cache.get(engine, MEMORY, SELECTOR)
    benchmark(cache.get, engine, MEMORY, SELECTOR)


@pytest.mark.parametrize("expression", [MEMORY, MODEL], ids=["quantity", "string"])
def test_evaluate_one_selector_on_one_device(
    benchmark: Any, engine: Engine, slices: dict[str, Any], expression: str
) -> None:
    device = next(devices_of_slice(next(iter(slices.values()))))
    activation = engine.device_activation(device)
    program = engine.compile(expression, SELECTOR)
    benchmark(program.evaluate, activation)


def _index(engine: Engine, slices: dict[str, Any]) -> DeviceIndex:
    index = DeviceIndex(engine)
    index.sync(slices, generation=1)
    return index


@pytest.mark.parametrize(
    "selectors", [(MEMORY, MODEL), (PER_DEVICE,)], ids=["shared-values", "per-device-values"]
)
def test_satisfiability_1000_devices_cold(
    benchmark: Any, engine: Engine, slices: dict[str, Any], selectors: tuple[str, ...]
) -> None:
    """Memo empty (a claim shape never seen at this generation); devices already converted."""
    index = _index(engine, slices)
    index.matching("gpu.nvidia.com", CLASS, selectors)

    def cold() -> int:
        index._memo.clear()
        return index.matching("gpu.nvidia.com", CLASS, selectors).count

    rounds = 20 if engine.name == "cel-expr-python" else 2
    count = benchmark.pedantic(cold, rounds=rounds, iterations=1, warmup_rounds=1)
    assert count == (500 if len(selectors) == 2 else 1000)


def test_satisfiability_1000_devices_warm(
    benchmark: Any, engine: Engine, slices: dict[str, Any]
) -> None:
    index = _index(engine, slices)
    index.matching("gpu.nvidia.com", CLASS, (MEMORY, MODEL))
    result = benchmark(index.matching, "gpu.nvidia.com", CLASS, (MEMORY, MODEL))
    assert result.count == 500


def test_convert_1000_devices(benchmark: Any, engine: Engine, slices: dict[str, Any]) -> None:
    """Once per slice version: parse the slices and build every device's activation."""
    generation = itertools.count(1)
    index = DeviceIndex(engine)

    def convert() -> None:
        index._slices.clear()
        index.sync(slices, generation=next(generation))

    benchmark.pedantic(convert, rounds=5 if engine.name == "cel-expr-python" else 2, iterations=1)


THREE_SELECTORS = (
    MEMORY,
    MODEL,
    'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("535.0.0"))',
)


def _pipeline(backend: str, slices: dict[str, Any]) -> Any:
    from tests.helpers import DEMO_NAMESPACES, make_pipeline, policy_from

    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": CLASS[0]}}]},
    }
    objects = [
        *DEMO_NAMESPACES,
        device_class,
        *({"kind": "ResourceSlice", **s} for s in slices.values()),
    ]
    return make_pipeline(objects, policy_from(THREE_RULES.format(backend=backend)))


def _round_trip(pipeline: Any, body: dict[str, Any]) -> Any:
    import orjson

    from app.pipeline import Endpoint
    from app.transport.response import encode, review_response
    from app.transport.review import decode_review
    from tests.helpers import wrap

    raw = orjson.dumps(wrap(body))

    def run() -> bytes:
        request = decode_review(raw)
        return encode(review_response(request.uid, pipeline.review(Endpoint.VALIDATE, request)))

    return run


def test_admission_of_a_claim_with_3_selectors(
    benchmark: Any, engine: Engine, slices: dict[str, Any]
) -> None:
    """decode -> selectors compile check + satisfiability (memo warm) + 1 rule -> encode."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default", "labels": {"owner": "me"}},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "selectors": [{"cel": {"expression": e}} for e in THREE_SELECTORS],
                        },
                    }
                ]
            }
        },
    }
    run = _round_trip(_pipeline(engine.name, slices), claim)
    assert b'"allowed":true' in run() and b"warnings" not in run()
    benchmark(run)


def test_admission_of_a_pod_with_3_cel_rules(
    benchmark: Any, engine: Engine, slices: dict[str, Any]
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"owner": "me"}},
        "spec": {"containers": [{"name": "app", "image": "cuda:12"}]},
    }
    run = _round_trip(_pipeline(engine.name, slices), pod)
    assert b'"allowed":true' in run()
    benchmark(run)
