"""What watching the Nodes' labels costs at N nodes, through a real API server (not a test).

    CONTROL_PLANE_ASSETS=... .venv/bin/python -m tests.cluster.node_scale [--nodes 5000]

On a control plane (tests/e2e/controlplane.py) with N Nodes shaped like a managed cluster's GPU
nodes (about 40 labels each, kubelet's and the node controllers' annotations and managed fields,
a status with images and conditions: tests/cluster/objects.py), racks of 40:

1. the bytes of one list of all Nodes, whole and as PartialObjectMetadataList (what the webhook
   asks for);
2. what the cluster view keeps of them (tracemalloc over the decoded metadata list, slimmed into
   a ClusterView), and the allocation model's inventory over them with one rack-level
   ResourceSlice of 8 NICs per rack (nodeSelector on the rack label) next to a node-local slice
   per node: build time and bytes;
3. with the node-local slices created (then the rack slices too), `dra-webhook serve
   --kubeconfig` as the webhook's identity, twice each: with docs/rbac.md's
   ClusterRole (nodes listed and watched) and with the same role less its `nodes` rule (403:
   no Node in the view): time to /readyz and RSS at ready, so the difference is the watch's.

With `--inprocess`, no API server: `make bench-scale-inprocess`'s 64k devices (8,000 node-local
slices, tests/scale_inprocess.py) with the 8,000 Nodes they name, labelled as above, so the
nodes are the cluster's and their labels known; then its series, and a Node relabelled.

    .venv/bin/python -m tests.cluster.node_scale --inprocess [--devices 64000] [--shapes 1000]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import yaml

from app.allocation import Allocations, Model
from app.cel.factory import get_engine
from app.cluster.view import ClusterView, Kind
from app.devices.index import DeviceIndex
from app.server import heap
from tests import scale_bench, scale_inprocess
from tests.assets import control_plane_assets
from tests.cluster import objects
from tests.cluster.memory import retained_bytes
from tests.e2e.controlplane import WEBHOOK, WEBHOOK_USER, ControlPlane
from tests.e2e.fleet import device_class
from tests.e2e.kube import ApiError, Kube
from tests.helpers import start_server, stop_server

Obj = dict[str, Any]
RACK_SIZE = 40
WORKERS = 8
METADATA = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
RBAC_DOC = Path(__file__).resolve().parents[2] / "docs" / "rbac.md"


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _create_all(plane: ControlPlane, items: list[Obj]) -> float:
    clients = [Kube(plane, timeout=120) for _ in range(WORKERS)]
    began = time.monotonic()

    def create(pair: tuple[int, Obj]) -> None:
        index, obj = pair
        for attempt in range(5):
            try:
                clients[index % WORKERS].create(obj)
                return
            except ApiError as error:
                if error.status == 409 and attempt > 0:
                    return
                if error.status not in (429, 500, 503, 504) or attempt == 4:
                    raise
            time.sleep(0.5 * (attempt + 1))

    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(create, enumerate(items)))
    finally:
        for client in clients:
            client.close()
    return time.monotonic() - began


def _gpu_slice(node: str, i: int) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [objects.gpu_device(k) for k in range(8)],
        },
    }


def _rack_slice(rack: int) -> Obj:
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "example.com/rack", "operator": "In", "values": [f"rack-{rack:03d}"]}]}]}  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"rack-{rack:03d}-nics"},
        "spec": {
            "driver": "nic.example.com",
            "nodeSelector": selector,
            "pool": {"name": f"rack-{rack:03d}", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"nic-{k}", "attributes": {"type": {"string": "nic"}}} for k in range(8)
            ],
        },
    }


def _role(with_nodes: bool) -> Obj:
    blocks = re.findall(r"```yaml\n(.*?)```", RBAC_DOC.read_text(), re.DOTALL)
    (role,) = [
        d
        for d in yaml.safe_load_all(blocks[0])
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "dra-webhook"
    ]
    found: Obj = role
    if not with_nodes:
        found["rules"] = [r for r in found["rules"] if "nodes" not in r["resources"]]
    return found


def _grant(kube: Kube, with_nodes: bool) -> None:
    kube.apply(_role(with_nodes))
    kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "dra-webhook"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "dra-webhook",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": WEBHOOK_USER}
            ],
        }
    )
    time.sleep(2)  # the authorizer's cache


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _serve(plane: ControlPlane, workdir: Path) -> tuple[float, float, str]:
    """Time to /readyz and RSS at ready of `dra-webhook serve` as the webhook's identity."""
    workdir.mkdir(parents=True)
    began = time.monotonic()
    server = start_server(
        workdir,
        "--kubeconfig",
        str(plane.kubeconfig(WEBHOOK)),
        env={"DRA_WEBHOOK_NAMESPACE": "dra-webhook"},
        ready_timeout=300,
    )
    ready = time.monotonic() - began
    rss = _rss_mib(server.process.pid)
    with server.client() as client:
        gauge = [
            line
            for line in client.get("/metrics").text.splitlines()
            if line.startswith(
                ("dra_webhook_node_labels_available", 'dra_webhook_cluster_objects{kind="Node"}')
            )
        ]
    stop_server(server)
    return ready, rss, "; ".join(gauge)


def _model_cost(nodes: list[Obj], slices: list[Obj]) -> tuple[float, int, int]:
    """Seconds to build the inventory over the Nodes, and its bytes; the bytes of the same
    model without Node objects (the names the slices give)."""
    engine = get_engine()
    timing: dict[str, float] = {}

    def build(with_nodes: bool) -> object:
        view = ClusterView()
        index = DeviceIndex(engine)
        view.subscribe(index.on_change)
        model = Model(index)
        view.subscribe(model.on_change)
        view.replace(Kind.RESOURCE_SLICE, slices)
        view.replace(Kind.NODE, nodes if with_nodes else [])
        began = time.perf_counter()
        model.inventory()
        timing[str(with_nodes)] = time.perf_counter() - began
        return view, index, model

    build(True)  # timed without tracemalloc, which slows allocations several times
    seconds = timing["True"]
    with_nodes = retained_bytes(lambda: build(True))
    without = retained_bytes(lambda: build(False))
    return seconds, with_nodes, without


class NodesBench(scale_inprocess.Bench):
    """scale_inprocess's bench with the Nodes its slices name (real nodes, labels known)."""

    def __init__(self, slices: int) -> None:  # (scale_inprocess.Bench, with Nodes)
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
            objs: list[Obj] = []
            if kind is Kind.RESOURCE_SLICE:
                objs = [scale_bench.resource_slice(n) for n in range(slices)]
                for n, obj in enumerate(objs):
                    obj["metadata"]["resourceVersion"] = str(n + 1)
            elif kind is Kind.DEVICE_CLASS:
                objs = [
                    device_class("gpu.nvidia.com", "gpu"),
                    device_class("mig.nvidia.com", "mig"),
                ]
            elif kind is Kind.NODE:
                objs = [_bench_node(n) for n in range(slices)]
            self.view.replace(kind, objs)
        self.ready = time.perf_counter() - began
        self.changes = 0


def _bench_node(n: int, rack: int | None = None) -> Obj:
    metadata = objects.node(n, rack=n // RACK_SIZE if rack is None else rack)["metadata"]
    metadata["name"] = f"node-{n:05d}"
    metadata["resourceVersion"] = str(n + 1)
    del metadata["managedFields"], metadata["annotations"]
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata}


def inprocess(devices: int, shapes: int) -> int:
    """The 64k-device series of tests/scale_inprocess.py with the slices' Nodes known."""
    slices = devices // 8
    rss_start = scale_inprocess.rss_mib()
    bench = NodesBench(slices)
    print(
        f"{slices:,} slices and Nodes, {8 * slices:,} devices; labels known: {bench.model.node_labels_known}"
    )
    print(
        f"view + index + model warmed: {bench.ready:.2f} s, RSS {rss_start:.0f} -> {scale_inprocess.rss_mib():.0f} MiB"
    )
    first, verdict = bench.check(scale_inprocess.memory_at_least(1))
    print(f"first claim: {first:.1f} ms ({verdict.outcome})")
    new = [(scale_inprocess.new_selector(i + 1), 1 + i % 4) for i in range(shapes)]
    scale_inprocess.timed(bench, new, None, "new shape")
    print(f"RSS after them {scale_inprocess.rss_mib():.0f} MiB")
    scale_inprocess.impossible(bench, 20, None)
    repeated = scale_inprocess.REPEATED
    bench.check(repeated)

    def after(i: int) -> float:
        bench.change_one_slice()
        return bench.check(repeated)[0]

    changed = scale_inprocess.series(after, 200)
    print(f"repeated shape after one slice change: p50 {scale_inprocess.pct(changed, 0.5):.3f} ms")
    relabelled = []
    for i in range(200):
        node = _bench_node((i * 7919) % slices, rack=10_000 + i)
        node["metadata"]["resourceVersion"] = f"relabel-{i}"
        began = time.perf_counter()
        bench.view.apply(Kind.NODE, node)
        relabelled.append((time.perf_counter() - began) * 1000)
    print(
        f"a Node relabelled (its node re-gathered): p50 {scale_inprocess.pct(relabelled, 0.5):.3f} ms, "
        f"p99 {scale_inprocess.pct(relabelled, 0.99):.3f} ms"
    )
    scale_inprocess.not_now(bench, 20, None)
    print(f"RSS at the end: {scale_inprocess.rss_mib():.0f} MiB")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--inprocess", action="store_true")
    parser.add_argument("--devices", type=int, default=64_000)
    parser.add_argument("--shapes", type=int, default=1000)
    args = parser.parse_args()
    if args.inprocess:
        return inprocess(args.devices, args.shapes)
    count = args.nodes
    racks = (count + RACK_SIZE - 1) // RACK_SIZE
    with tempfile.TemporaryDirectory(prefix="node-scale-") as tmp:
        workdir = Path(tmp)
        plane = ControlPlane(control_plane_assets(), workdir / "plane")
        plane.start()
        kube = Kube(plane, timeout=120)
        try:
            made = _create_all(plane, [objects.node(i, rack=i // RACK_SIZE) for i in range(count)])
            _log(f"{count:,} Nodes created in {made:.0f} s")
            whole = kube.http.get("/api/v1/nodes").content
            metadata = kube.http.get("/api/v1/nodes", headers={"Accept": METADATA}).content
            items = orjson.loads(metadata)["items"]
            assert len(items) == count, len(items)
            print(
                f"one list of {count:,} Nodes: {len(whole) / 2**20:.1f} MiB whole, "
                f"{len(metadata) / 2**20:.1f} MiB as PartialObjectMetadataList"
            )
            wire = [orjson.dumps(item) for item in items]
            decoded = retained_bytes(lambda: [orjson.loads(w) for w in wire])
            held = retained_bytes(lambda: _view_of(wire))
            print(
                f"decoded metadata {decoded / 2**20:.1f} MiB; held by the view {held / 2**20:.1f} "
                f"MiB ({held / count:,.0f} B per node)"
            )
            node_objs = [orjson.loads(w) for w in wire]
            local = [_gpu_slice(f"gpu-node-{i:05d}", i) for i in range(count)]
            rack = [_rack_slice(r) for r in range(racks)]
            seconds, with_nodes, without = _model_cost(node_objs, [*local, *rack])
            print(
                f"model over {count:,} node slices and {racks} rack slices: inventory built in "
                f"{seconds:.2f} s; view+index+model {with_nodes / 2**20:.0f} MiB with the Nodes, "
                f"{without / 2**20:.0f} MiB without"
            )
            for slices, what in ((local, "node-local slices"), (rack, "and rack slices")):
                made = _create_all(plane, slices)
                _log(f"{len(slices):,} ResourceSlices created in {made:.0f} s")
                for with_nodes_rule in (True, False):
                    _grant(kube, with_nodes_rule)
                    ready, rss, gauge = _serve(plane, workdir / f"serve-{what}-{with_nodes_rule}")
                    role = "with" if with_nodes_rule else "without"
                    print(
                        f"{what}: serve {role} `nodes` in its role: ready {ready:.2f} s, "
                        f"RSS {rss:.0f} MiB ({gauge})"
                    )
        finally:
            kube.close()
            plane.stop()
    return 0


def _view_of(wire: list[bytes]) -> ClusterView:
    view = ClusterView()
    view.replace(Kind.NODE, [orjson.loads(w) for w in wire])
    return view


if __name__ == "__main__":
    raise SystemExit(main())
