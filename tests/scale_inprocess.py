"""The scale benchmark in one process (`make bench-scale-inprocess`, not part of `make test`):
the allocation model and the device index alone, no API server, no HTTP.

A ClusterView holds N node-local ResourceSlices of 8 GPUs shaped like the NVIDIA driver's (the
slices of `tests/scale_bench.py`) and the two NVIDIA DeviceClasses; the device index and the model
are subscribed and warmed as the pipeline does at sync, with the collector held off during the
sync and the heap collected and frozen after it, as the server does (app/transport/heap.py). Then, timed one by one as a review would call the model:

- new shapes: a memory threshold (`compareTo(quantity(...))`), every third one with an equality
  on productName, count 1-4; each selector set never seen before;
- impossible new shapes (more memory than any GPU has): the nearest-miss explanation;
- one shape repeated; the same shape repeated right after one slice changed;
- RSS at each step (after the new shapes: the byte-bounded caches full of them).

    .venv/bin/python -m tests.scale_inprocess [--devices 64000] [--shapes 1000] [--profile FILE]
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
from app.cel.index import DeviceIndex
from app.cluster.view import ClusterView, Kind
from app.k8s.claims import parse_claim_spec
from app.transport import heap
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

    profile = cProfile.Profile() if args.profile else None
    outcomes: dict[str, int] = {}

    def new(i: int) -> float:
        if profile is not None:
            profile.enable()
        took, verdict = bench.check(new_selector(i + 1), 1 + i % 4)
        if profile is not None:
            profile.disable()
        outcomes[verdict.outcome] = outcomes.get(verdict.outcome, 0) + 1
        return took

    fresh = series(new, args.shapes)
    if profile is not None:
        profile.dump_stats(args.profile)
    rss_shapes = rss_mib()
    print(
        f"new shape ({args.shapes}, {outcomes}): p50 {pct(fresh, 0.5):.2f} ms, "
        f"p99 {pct(fresh, 0.99):.2f} ms, max {max(fresh):.1f} ms; "
        f"RSS after them {rss_shapes:.0f} MiB"
    )
    never = series(lambda i: bench.check(memory_at_least(81921 + i))[0], 20)
    print(
        f"impossible new shape (20, never): p50 {pct(never, 0.5):.1f} ms, max {max(never):.1f} ms"
    )

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
    print(f"RSS at the end: {rss_mib():.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
