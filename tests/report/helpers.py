"""A fake API server holding a small cluster, run on a thread of its own so that both async
tests and the synchronous CLI (which runs its own event loop) can talk to it: the cluster's
objects (`seed`) and the thread (`Running`), shared by the report tests and others."""

from __future__ import annotations

import asyncio
import threading

from tests.report.fake_cluster import FakeCluster, namespace, pod, workload

NAMESPACES = [
    namespace("kube-system"),
    namespace("train", **{"gpu-mode": "dra-only"}),
    namespace("serve", **{"gpu-mode": "audit"}),
    namespace("lab", **{"gpu-mode": "translate"}),
    namespace("empty", **{"gpu-mode": "translate"}),
]
NODES = [
    {"metadata": {"name": "gpu-1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}},
    {"metadata": {"name": "cpu-1"}, "status": {"allocatable": {"cpu": "16"}}},
]
OBJECTS: dict[str, list[dict[str, object]]] = {
    "/apis/apps/v1/deployments": [workload("Deployment", "serve", "api", "nvidia.com/gpu")],
    "/apis/apps/v1/replicasets": [
        workload("ReplicaSet", "serve", "api-1", "nvidia.com/gpu", owner=("Deployment", "api")),
        workload("ReplicaSet", "lab", "loose", None),
    ],
    "/apis/batch/v1/cronjobs": [workload("CronJob", "lab", "nightly", "habana.ai/gaudi")],
    "/apis/batch/v1/jobs": [
        workload("Job", "lab", "nightly-1", "habana.ai/gaudi", owner=("CronJob", "nightly"))
    ],
    "/api/v1/pods": [
        pod("serve", "api-1-a", "nvidia.com/gpu", owner=("ReplicaSet", "api-1")),
        pod("serve", "api-1-b", "nvidia.com/gpu", owner=("ReplicaSet", "api-1")),
        pod("lab", "nightly-1-x", "habana.ai/gaudi", owner=("Job", "nightly-1")),
        pod("lab", "loose-a", None, owner=("ReplicaSet", "loose")),
        pod("train", "bare", "nvidia.com/gpu"),
        pod("train", "plain"),
        pod("train", "mirror", None, owner=("Node", "node-1")),
        pod("kube-system", "dns"),
    ],
}


def seed(cluster: FakeCluster) -> None:
    cluster.serve("/api/v1/namespaces", len(NAMESPACES), NAMESPACES.__getitem__)
    cluster.serve("/apis/resource.k8s.io/v1/deviceclasses", 0, lambda i: {})
    cluster.serve("/api/v1/nodes", len(NODES), NODES.__getitem__)
    cluster.serve("/apis/scheduling.k8s.io/v1/priorityclasses", 0, lambda i: {})
    for path in (
        "/apis/batch/v1/cronjobs",
        "/apis/apps/v1/deployments",
        "/apis/apps/v1/statefulsets",
        "/apis/apps/v1/daemonsets",
        "/api/v1/replicationcontrollers",
        "/api/v1/podtemplates",
        "/apis/apps/v1/replicasets",
        "/apis/batch/v1/jobs",
        "/api/v1/pods",
        "/apis/resource.k8s.io/v1/resourceclaimtemplates",
        "/apis/resource.k8s.io/v1/resourceclaims",
    ):
        items = OBJECTS.get(path, [])
        cluster.serve(path, len(items), items.__getitem__)


class Running:
    """A FakeCluster served from a thread's event loop."""

    def __init__(self) -> None:
        self.cluster = FakeCluster()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> FakeCluster:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.cluster.start(), self.loop).result(10)
        return self.cluster

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self.cluster.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
