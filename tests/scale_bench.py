"""The scale benchmark (`make bench-scale`, not part of `make test`): the webhook at N
ResourceSlices through a real control plane (tests/e2e/controlplane.py).

For each size: N node-local slices of 8 GPUs shaped like the NVIDIA driver's, 2 ResourceClaims
per slice in 20 dra-only namespaces, all created (concurrently) before the webhook starts; then
server-side dry-run creates of ResourceClaims, sequential: the first claim, ~200 new shapes,
~200 repeats of one shape, ~200 repeats each right after one slice changed. Prints one table
row per size (docs/benchmarks.md, "Scale"), with the first claim against the new shapes' p99
after it (what warm-up before ready is for: app/devices/warm.py), progress and the server log's
warnings on stderr.

- ready: from spawning the server process to its health port's /readyz answering 200 (polled
  every 10 ms; the probe listener has its own thread, so the poll never waits behind the sync).
  The time to the first review the API server sends it once registered is printed after the row
  (it adds helm, the API server picking up the configurations and the probe's round trips).
- RSS: the server process's (VmRSS of its pid, one worker: no child processes), at the moment
  /readyz turned 200 and after the last series.
- after a slice change: each claim is sent once the webhook's own counter of ResourceSlice
  MODIFIED events shows it applied the change (`dra_webhook_cluster_watch_events_total`), not after a
  fixed sleep that a busy event loop may outlast.
- A create the API server refuses (e.g. the webhook's timeout passed) is counted, not fatal.

    CONTROL_PLANE_ASSETS=... .venv/bin/python -m tests.scale_bench [--sizes 250,1000] [--series 200]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.assets import control_plane_assets, k8s_tool
from tests.e2e.controlplane import ControlPlane
from tests.e2e.fleet import DRIVER, _gpu, device_class
from tests.e2e.kube import ApiError, Kube
from tests.e2e.webhook import Webhook, start_webhook, stop_webhook
from tests.helpers import TlsServer

Obj = dict[str, Any]
NAMESPACES = 20
PRODUCTS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
WORKERS = 8
"""Concurrent creates: enough to keep the API server and etcd busy on 2 cores (admin requests
are exempt from API Priority and Fairness, so nothing is throttled)."""
CLIENT_TIMEOUT = 120.0
READY_TIMEOUT = 300.0
"""The webhook's sync of 8,000 slices and 16,000 claims on a loaded machine: far above the goal
(5 s), so a slow sync is measured, not cut off."""
READY_POLL = 0.01
EVENT_TIMEOUT = 30.0


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


def _parallel(plane: ControlPlane, items: list[Obj], what: str) -> float:
    """Create `items` from WORKERS clients at once; returns the seconds it took. A create that
    times out or is throttled is sent again (409 then means an earlier attempt landed)."""
    clients = [Kube(plane, timeout=CLIENT_TIMEOUT) for _ in range(WORKERS)]
    began = time.monotonic()
    counted = itertools.count(1)  # next() is atomic under the GIL

    def create(pair: tuple[int, Obj]) -> None:
        index, obj = pair
        _create(clients[index % WORKERS], obj)
        done = next(counted)
        if done % 2000 == 0:
            _log(f"  {what}: {done:,}/{len(items):,} in {time.monotonic() - began:.0f} s")

    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(create, enumerate(items)))
    finally:
        for client in clients:
            client.close()
    return time.monotonic() - began


def _create(kube: Kube, obj: Obj, attempts: int = 5) -> None:
    for attempt in range(attempts):
        try:
            kube.create(obj)
            return
        except ApiError as error:
            if error.status == 409 and attempt > 0:
                return
            if error.status not in (429, 500, 503, 504) or attempt == attempts - 1:
                raise
        except httpx.TransportError:
            if attempt == attempts - 1:
                raise
        time.sleep(0.5 * (attempt + 1))


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _timed(kube: Kube, obj: Obj, failures: list[str]) -> float | None:
    """Milliseconds for one server-side dry-run create; None (and the reason in `failures`)
    when the API server refused it, e.g. because the webhook did not answer within its timeout."""
    began = time.perf_counter()
    try:
        kube.create(obj, dry_run=True)
    except (ApiError, httpx.TransportError) as error:
        failures.append(f"{obj['metadata']['name']}: {error}")
        return None
    return (time.perf_counter() - began) * 1000


def _pct(values: list[float | None], q: float) -> float:
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat utime and stime): on a shared
    machine, the part of a wall time that is the process's own work."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Readiness:
    """Polls the webhook's health port (plain HTTP, its own thread in the server, so the poll
    never queues behind the sync) from the moment the process is spawned until /readyz answers
    200: the time from process start to ready, and the server process's RSS at that moment."""

    def __init__(self, deadline: float, profile: Path | None = None) -> None:
        self.deadline = deadline
        self.profile = profile
        """Where to write py-spy's samples of the server from spawn to ready (collapsed
        stacks, one line per stack: flamegraph.pl or speedscope read them)."""
        self._spy: subprocess.Popen[bytes] | None = None
        self.seconds: float | None = None
        self.listening: float | None = None
        """When the health port first answered (imports done, lifespan started, sync begun)."""
        self.rss: float = 0.0
        self.cpu: float = 0.0
        self.pid = 0
        self._thread: threading.Thread | None = None

    def spawned(self, server: TlsServer) -> None:
        self.pid = server.process.pid
        if self.profile is not None:
            self._spy = subprocess.Popen(
                ["py-spy", "record", "--pid", str(self.pid), "--rate", "200", "--format", "raw",
                 "--output", str(self.profile), "--duration", str(int(self.deadline))],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        self._thread = threading.Thread(
            target=self._poll, args=(server,), name="readyz poll", daemon=True
        )
        self._thread.start()

    def _poll(self, server: TlsServer) -> None:
        while time.monotonic() - server.started < self.deadline and server.process.poll() is None:
            status = _readyz(server.health_port)
            if status and self.listening is None:
                self.listening = time.monotonic() - server.started
            if status == 200:
                self.seconds = time.monotonic() - server.started
                self.rss = _rss_mib(server.process.pid)
                self.cpu = _cpu_seconds(server.process.pid)
                break
            time.sleep(READY_POLL)
        if self._spy is not None:  # SIGINT: py-spy writes what it sampled and exits
            self._spy.send_signal(signal.SIGINT)
            try:
                self._spy.wait(30)
            except subprocess.TimeoutExpired:
                self._spy.kill()
                self._spy.wait()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(self.deadline)


def _readyz(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", "/readyz")
        return connection.getresponse().status
    except OSError:
        return 0
    finally:
        connection.close()


def _slice_events(webhook: Webhook) -> float:
    return webhook.metric(
        "dra_webhook_cluster_watch_events_total", kind="ResourceSlice", type="MODIFIED"
    )


def _change_slice(kube: Kube, webhook: Webhook, n: int, generation: int) -> None:
    """Replace one slice and wait until the webhook has applied the watch event to its view
    (the counter is bumped in the same loop callback that applies the event)."""
    seen = _slice_events(webhook)
    changed = resource_slice(n, generation)
    name = changed["metadata"]["name"]
    current = kube.get("ResourceSlice", name)
    changed["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    kube._send("PUT", f"/apis/resource.k8s.io/v1/resourceslices/{name}", json=changed)
    deadline = time.monotonic() + EVENT_TIMEOUT
    while _slice_events(webhook) <= seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"the webhook never saw the change of ResourceSlice {name}")
        time.sleep(0.01)


def _problems(log: Path) -> list[str]:
    """The server log's warnings and errors (product problems to report)."""
    flagged = re.compile(r'"level": ?"(WARNING|ERROR|CRITICAL)"|Traceback')
    return [line for line in log.read_text(errors="replace").splitlines() if flagged.search(line)]


def run_size(slices: int, series: int, workdir: Path, profile: Path | None = None) -> str:
    plane = ControlPlane(control_plane_assets(), workdir / "plane")
    plane.start()
    kube = Kube(plane, timeout=CLIENT_TIMEOUT)
    try:
        namespaces = [
            kube.namespace(f"scale-{i:02d}", **{"gpu-mode": "dra-only"}) for i in range(NAMESPACES)
        ]
        for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
            kube.apply(device_class(name, kind))
        made = _parallel(plane, [resource_slice(n) for n in range(slices)], "slices")
        claims = [claim(namespaces[i % NAMESPACES], f"c-{i}", REPEATED) for i in range(2 * slices)]
        made += _parallel(plane, claims, "claims")
        _log(f"  {slices:,} slices and {2 * slices:,} claims created in {made:.0f} s")
        readiness = _Readiness(READY_TIMEOUT, profile)
        webhook = start_webhook(
            plane, kube, k8s_tool("helm"), workdir / "webhook",
            ready_timeout=READY_TIMEOUT, spawned=readiness.spawned,
        )  # fmt: skip
        called = time.monotonic() - webhook.server.started
        readiness.join()
        if readiness.seconds is None:
            raise AssertionError("the health port never answered /readyz 200")
        pid = webhook.server.process.pid
        ns = namespaces[0]
        failures: list[str] = []
        first = _timed(kube, claim(ns, "first", memory_at_least(1)), failures)
        new = [
            _timed(kube, claim(ns, f"n-{i}", memory_at_least(2 + i), 1 + i % 4), failures)
            for i in range(series)
        ]
        repeated = [_timed(kube, claim(ns, f"r-{i}", REPEATED), failures) for i in range(series)]
        after = []
        for i in range(series):
            _change_slice(kube, webhook, i % slices, generation=2 + i)
            after.append(_timed(kube, claim(ns, f"a-{i}", REPEATED), failures))
        rss_after = _rss_mib(pid)
        stop_webhook(webhook)
        for line in [*failures, *_problems(webhook.server.log)][:20]:
            _log(f"  ! {line[:400]}")
        first_text = f"{first:,.0f} ms" if first is not None else "failed"
        # the goal: a first claim after a start costs what any new shape does (<= 1.5x its p99)
        ratio = f"{first / _pct(new, 0.99):.2f}x" if first is not None else "-"
        return (
            f"| {slices:,} | {8 * slices:,} | {readiness.seconds:.2f} s "
            f"| {readiness.rss:.0f} -> {rss_after:.0f} MiB "
            f"| {first_text} | {_pct(new, 0.5):.1f} / {_pct(new, 0.99):.1f} ms "
            f"| {_pct(repeated, 0.5):.1f} ms | {_pct(after, 0.5):.1f} / {_pct(after, 0.99):.1f} ms |"
            f"  (1st claim / new-shape p99 {ratio}; "
            f"ready after {readiness.cpu:.1f} s of the server's CPU; "
            f"health port up {readiness.listening or 0:.2f} s after start; "
            f"first review through the API server {called:.2f} s after start; "
            f"{len(failures)} refused; objects created in {made:.0f} s)"
        )
    finally:
        kube.close()
        plane.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250,1000,4000,8000")
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep each size's folder (logs) under this one"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="folder for py-spy samples of the server from spawn to ready (needs py-spy)",
    )
    args = parser.parse_args()
    print(
        "| slices | devices | ready | RSS ready -> after | 1st claim | new shape p50/p99 "
        "| repeated shape p50 | after a slice change p50/p99 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for size in (int(s) for s in args.sizes.split(",")):
        began = time.monotonic()
        profile = None
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
            profile = args.profile.resolve() / f"sync-{size}.txt"
        if args.keep is not None:
            folder = args.keep.resolve() / f"bench-scale-{size}"
            folder.mkdir(parents=True)  # a fresh one: etcd's data must not be reused
            print(run_size(size, args.series, folder, profile), flush=True)
        else:
            with tempfile.TemporaryDirectory(prefix=f"bench-scale-{size}-") as temporary:
                print(run_size(size, args.series, Path(temporary), profile), flush=True)
        _log(f"  {size:,} slices: {time.monotonic() - began:.0f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
