"""The scale benchmark (`make bench-scale`, not part of `make test`): the webhook at N
ResourceSlices through a real control plane (tests/e2e/controlplane.py).

For each size: N node-local slices of 8 GPUs shaped like the NVIDIA driver's, 2 ResourceClaims
per slice in 20 dra-only namespaces, all created (concurrently) before the webhook starts; then
server-side dry-run creates of ResourceClaims, sequential: the first claim, ~200 new shapes,
~200 repeats of one shape, ~200 repeats each right after one slice changed. Prints one table
row per size (docs/benchmarks.md, "Scale").

    CONTROL_PLANE_ASSETS=... .venv/bin/python -m tests.scale_bench [--sizes 250,1000] [--series 200]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.assets import control_plane_assets, k8s_tool
from tests.e2e.controlplane import ControlPlane
from tests.e2e.fleet import DRIVER, _gpu, device_class
from tests.e2e.kube import Kube
from tests.e2e.webhook import start_webhook, stop_webhook

Obj = dict[str, Any]
NAMESPACES = 20
PRODUCTS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
WORKERS = 8
TIMEOUT = 1800.0


def resource_slice(n: int, generation: int = 1) -> Obj:
    node = f"node-{n:05d}"
    product = PRODUCTS[n % 2]
    devices = [
        _gpu(f"gpu-{i}", product, "80Gi", "Hopper", i, uuid={"string": f"GPU-{node}-{i}"})
        for i in range(8)
    ]
    if generation > 1:
        devices[0]["attributes"]["healthy"] = {"bool": generation % 2 == 0}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def claim(namespace: str, name: str, selector: str, count: int = 1) -> Obj:
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "count": count,
            "selectors": [{"cel": {"expression": selector}}],
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [request]}},
    }


def memory_at_least(mib: int) -> str:
    return f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{mib}Mi")) >= 0'


REPEATED = f'device.attributes["{DRIVER}"].productName == "{PRODUCTS[0]}"'


def _parallel(plane: ControlPlane, items: list[Obj], make: Callable[[Kube, Obj], object]) -> None:
    clients = [Kube(plane, timeout=60) for _ in range(WORKERS)]
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(lambda pair: make(clients[pair[0] % WORKERS], pair[1]), enumerate(items)))
    finally:
        for client in clients:
            client.close()


def _timed(kube: Kube, obj: Obj) -> float:
    began = time.perf_counter()
    kube.create(obj, dry_run=True)
    return (time.perf_counter() - began) * 1000


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_size(slices: int, series: int, workdir: Path) -> str:
    plane = ControlPlane(control_plane_assets(), workdir / "plane")
    plane.start()
    kube = Kube(plane)
    try:
        namespaces = [
            kube.namespace(f"scale-{i:02d}", **{"gpu-mode": "dra-only"}) for i in range(NAMESPACES)
        ]
        for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
            kube.apply(device_class(name, kind))
        began = time.monotonic()
        _parallel(plane, [resource_slice(n) for n in range(slices)], lambda k, o: k.create(o))
        claims = [claim(namespaces[i % NAMESPACES], f"c-{i}", REPEATED) for i in range(2 * slices)]
        _parallel(plane, claims, lambda k, o: k.create(o))
        created = time.monotonic() - began
        started = time.monotonic()
        webhook = start_webhook(plane, kube, k8s_tool("helm"), workdir / "webhook")
        ready = time.monotonic() - started  # up to the first review answered (readyz true)
        pid = webhook.server.process.pid
        rss_ready = _rss_mib(pid)
        ns = namespaces[0]
        first = _timed(kube, claim(ns, "first", memory_at_least(1)))
        new = [
            _timed(kube, claim(ns, f"n-{i}", memory_at_least(2 + i), 1 + i % 4))
            for i in range(series)
        ]
        repeated = [_timed(kube, claim(ns, f"r-{i}", REPEATED)) for i in range(series)]
        after = []
        for i in range(series):
            changed = resource_slice(i % slices, generation=2 + i)
            current = kube.get("ResourceSlice", changed["metadata"]["name"])
            changed["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            kube._send(
                "PUT",
                f"/apis/resource.k8s.io/v1/resourceslices/{changed['metadata']['name']}",
                json=changed,
            )
            time.sleep(0.05)  # the watch event reaches the webhook
            after.append(_timed(kube, claim(ns, f"a-{i}", REPEATED)))
        rss_after = _rss_mib(pid)
        stop_webhook(webhook)
        return (
            f"| {slices:,} | {8 * slices:,} | {ready:.2f} s | {rss_ready:.0f} -> {rss_after:.0f} MiB "
            f"| {first:.0f} ms | {_pct(new, 0.5):.1f} / {_pct(new, 0.99):.1f} ms "
            f"| {_pct(repeated, 0.5):.1f} ms | {_pct(after, 0.5):.1f} / {_pct(after, 0.99):.1f} ms |"
            f"  (objects created in {created:.0f} s)"
        )
    finally:
        kube.close()
        plane.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250,1000,4000,8000")
    parser.add_argument("--series", type=int, default=200)
    args = parser.parse_args()
    print(
        "| slices | devices | ready | RSS ready -> after | 1st claim | new shape p50/p99 "
        "| repeated shape p50 | after a slice change p50/p99 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix=f"bench-scale-{size}-") as folder:
            print(run_size(size, args.series, Path(folder)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
