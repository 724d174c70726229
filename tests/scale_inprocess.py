"""The scale benchmark in one process (`make bench-scale-inprocess`, not part of `make test`):
the allocation model and the device index alone, no API server, no HTTP.

A ClusterView holds N node-local ResourceSlices of 8 GPUs shaped like the NVIDIA driver's (the
slices of `tests/scale_bench.py`) and the two NVIDIA DeviceClasses; the device index and the model
are subscribed and warmed as the pipeline does at sync, with the collector held off during the
sync and the heap collected and frozen after it, as the server does (app/server/heap.py). Then, timed one by one as a review would call the model:

- new shapes: a memory threshold (`compareTo(quantity(...))`), every third one with an equality
  on productName, count 1-4; each selector set never seen before;
- impossible new shapes (more memory than any GPU has; 9 GPUs on one node): "never" with the
  nearest miss;
- one shape repeated; the same shape repeated right after one slice changed;
- RSS at each step (after the new shapes: the byte-bounded caches full of them);
- last, with one GPU of every other node allocated to a claim, new shapes for all 8 GPUs of such
  a node: "not now", after searching every node.

    .venv/bin/python -m tests.scale_inprocess [--devices 64000] [--shapes 1000] [--profile FILE]
        [--profile-never FILE] [--never N]
"""

from __future__ import annotations

import argparse
import cProfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.allocation import Allocations, ClaimInput, Model, Verdict
from app.cel.factory import get_engine
from app.cluster.view import ClusterView, Kind
from app.devices.index import DeviceIndex
from app.k8s.claims import parse_claim_spec
from app.server import heap
from tests.e2e.fleet import DRIVER, device_class
from tests.scale_bench import PRODUCTS, REPEATED, resource_slice

Obj = dict[str, Any]


def memory_at_least(mib: int) -> str:
    return f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{mib}Mi")) >= 0'


def new_selector(i: int) -> str:
    """The i-th distinct selector set: a threshold at or under 80Gi (every GPU has 80Gi)."""
    memory = memory_at_least(1 + (i * 79) % 81920)
    if i % 3 == 0:
        return f'{memory} && device.attributes["{DRIVER}"].productName == "{PRODUCTS[i % 2]}"'
    return memory


def spec(selector: str, count: int = 1) -> Any:
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "count": count,
            "selectors": [{"cel": {"expression": selector}}],
        },
    }
    return parse_claim_spec({"devices": {"requests": [request]}})


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(self, slices: int) -> None:
        self.view = ClusterView()
        self.index = DeviceIndex(get_engine())
        self.model = Model(self.index)
        self.view.subscribe(self.index.on_change)
        self.view.subscribe(self.model.on_change)
        self.view.when_synced(lambda: self.model.warm(self.view.device_classes()))
        self.view.when_synced(heap.settle)
        self.allocations = self.view.derived(Allocations)
        self.slices = slices
        heap.hold()
        began = time.perf_counter()
        for kind in Kind:
            if kind is Kind.RESOURCE_SLICE:
                objs: list[Obj] = [resource_slice(n) for n in range(slices)]
                for n, obj in enumerate(objs):
                    obj["metadata"]["resourceVersion"] = str(n + 1)
            elif kind is Kind.DEVICE_CLASS:
                objs = [
                    device_class("gpu.nvidia.com", "gpu"),
                    device_class("mig.nvidia.com", "mig"),
                ]
            else:
                objs = []
            self.view.replace(kind, objs)
        self.ready = time.perf_counter() - began
        self.changes = 0

    def check(self, selector: str, count: int = 1) -> tuple[float, Verdict]:
        claims = [ClaimInput("claim bench/c", spec(selector, count))]
        began = time.perf_counter()
        verdict = self.model.check(
            claims,
            self.view.device_classes(),
            self.allocations,
            classes_generation=self.view.generation(Kind.DEVICE_CLASS),
        )
        return (time.perf_counter() - began) * 1000, verdict

    def change_one_slice(self) -> None:
        self.changes += 1
        n = (self.changes * 7919) % self.slices
        changed = resource_slice(n, generation=2 + self.changes)
        changed["metadata"]["resourceVersion"] = f"c{self.changes}"
        self.view.apply(Kind.RESOURCE_SLICE, changed)


def series(run: Callable[[int], float], n: int) -> list[float]:
    return [run(i) for i in range(n)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=64_000)
    parser.add_argument("--shapes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--profile", help="write a cProfile of the new shapes to this file")
    parser.add_argument(
        "--profile-never",
        help="write a cProfile of the impossible new shapes to this file (and of the other "
        "never and not-now series to FILE.per-node, FILE.not-now)",
    )
    parser.add_argument("--never", type=int, default=20, help="shapes in each never/not-now series")
    args = parser.parse_args()
    slices = args.devices // 8
    rss_start = rss_mib()
    bench = Bench(slices)
    rss_ready = rss_mib()
    print(
        f"{slices:,} slices, {8 * slices:,} devices; Python {__import__('sys').version.split()[0]}"
    )
    print(
        f"view + index + model warmed: {bench.ready:.2f} s, RSS {rss_start:.0f} -> {rss_ready:.0f} MiB"
    )

    first, verdict = bench.check(memory_at_least(1))
    print(f"first claim: {first:.1f} ms ({verdict.outcome})")

    shapes = [(new_selector(i + 1), 1 + i % 4) for i in range(args.shapes)]
    timed(bench, shapes, args.profile, "new shape")
    print(f"RSS after them {rss_mib():.0f} MiB")
    impossible(bench, args.never, args.profile_never)

    bench.check(REPEATED)
    repeated = series(lambda i: bench.check(REPEATED)[0], args.repeats)
    print(f"repeated shape: p50 {pct(repeated, 0.5):.3f} ms, p99 {pct(repeated, 0.99):.3f} ms")

    def after(i: int) -> float:
        bench.change_one_slice()
        return bench.check(REPEATED)[0]

    changed = series(after, args.repeats)
    print(
        f"repeated shape after one slice change: p50 {pct(changed, 0.5):.3f} ms, "
        f"p99 {pct(changed, 0.99):.3f} ms"
    )

    def new_after(i: int) -> float:
        bench.change_one_slice()
        return bench.check(new_selector(100_000 + i), 1 + i % 4)[0]

    fresh_after = series(new_after, min(args.repeats, 100))
    print(
        f"new shape after one slice change: p50 {pct(fresh_after, 0.5):.2f} ms, "
        f"p99 {pct(fresh_after, 0.99):.2f} ms"
    )
    new_fields(bench)
    not_now(bench, args.never, args.profile_never)
    print(f"RSS at the end: {rss_mib():.0f} MiB")
    return 0


def timed(bench: Bench, shapes: list[tuple[str, int]], profile_to: str | None, what: str) -> None:
    """Check each new shape once, timed (and profiled into ``profile_to``), and print the
    percentiles with the verdicts seen."""
    profile = cProfile.Profile() if profile_to else None
    outcomes: dict[str, int] = {}
    took = []
    for selector, count in shapes:
        if profile is not None:
            profile.enable()
        ms, verdict = bench.check(selector, count)
        if profile is not None:
            profile.disable()
        outcomes[verdict.outcome] = outcomes.get(verdict.outcome, 0) + 1
        took.append(ms)
    if profile is not None and profile_to:
        profile.dump_stats(profile_to)
    print(
        f"{what} ({len(shapes)}, {outcomes}): p50 {pct(took, 0.5):.2f} ms, "
        f"p99 {pct(took, 0.99):.2f} ms, max {max(took):.1f} ms"
    )


def impossible(bench: Bench, n: int, profile_to: str | None) -> None:
    """New shapes no device can satisfy: more memory than any GPU has (none matches in the
    cluster), then 9 GPUs on one node (the most on any node is 8)."""
    timed(
        bench, [(memory_at_least(81921 + i), 1) for i in range(n)], profile_to, "never, none match"
    )
    timed(
        bench,
        [(memory_at_least(1 + i), 9) for i in range(n)],
        profile_to and f"{profile_to}.per-node",
        "never, 9 on one node",
    )


FIELDS = ("type", "productName", "brand", "architecture", "index", "driverVersion")


def new_fields(bench: Bench) -> None:
    """Shapes each reading a set of fields no shape read before (as the first claim does: the
    slices are grouped on those fields once), then shapes reading a per-device attribute
    (``uuid``: every slice is a group of its own, every device a view of its own)."""
    same = 'device.attributes["{d}"].{a} == device.attributes["{d}"].{a}'
    shapes = []
    for i, first in enumerate(FIELDS):
        for second in FIELDS[i + 1 :]:
            reads = [same.format(d=DRIVER, a=a) for a in (first, second)]
            shapes.append((" && ".join([memory_at_least(1), *reads]), 1))
    timed(bench, shapes, None, "new shape reading fields never read")
    before = rss_mib()
    uuid = f'device.attributes["{DRIVER}"].uuid'
    shapes = [(f'{uuid} != "GPU-none-{i}"', 1 + i % 4) for i in range(20)]
    timed(bench, shapes, None, "new shape reading uuid")
    print(f"RSS after the uuid shapes: {before:.0f} -> {rss_mib():.0f} MiB")


def not_now(bench: Bench, n: int, profile_to: str | None) -> None:
    """New shapes for all 8 GPUs of one node of the second product, after one GPU of every
    such node was allocated to a claim: possible, but not now (every node is searched)."""
    for node in range(1, bench.slices, 2):
        bench.view.apply(Kind.RESOURCE_CLAIM, allocated(f"held-{node}", f"node-{node:05d}"))
    product = f'device.attributes["{DRIVER}"].productName == "{PRODUCTS[1]}"'
    shapes = [(f"{memory_at_least(1 + i)} && {product}", 8) for i in range(n)]
    timed(bench, shapes, profile_to and f"{profile_to}.not-now", "not now")


def allocated(name: str, pool: str) -> Obj:
    """A claim in another namespace allocated the pool's first GPU."""
    result = {"request": "r", "driver": DRIVER, "pool": pool, "device": "gpu-0"}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "other", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


if __name__ == "__main__":
    raise SystemExit(main())
