"""What the live-source tests share: the fake API server's small cluster (`seed`), settings
for a source over it, and `eventually`."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from app.config import Settings
from app.config.settings import ClusterSource
from tests.cluster import objects
from tests.cluster.fake_apiserver import FakeApiServer

FAST = {
    "stale_after_seconds": 0.3,
    "backoff_initial_seconds": 0.01,
    "backoff_max_seconds": 0.05,
    "watch_timeout_seconds": 30.0,
    "list_page_size": 2,
    "api_timeout_seconds": 2.0,
}
"""Short bounds so that outages, backoff and staleness play out in tenths of a second."""
ROOMY = {"stale_after_seconds": 1.0}
"""For tests that check the view is still trusted right after an outage begins: a bound that a
loaded machine cannot overrun between two statements."""


def seed(server: FakeApiServer) -> None:
    """A small cluster: every kind, several namespaces and claims (more than one list page)."""
    for obj in (
        objects.namespace("default"),
        objects.namespace("gpu-e2e", **{"gpu-mode": "dra-only"}),
        objects.namespace("ml-research", **{"gpu-mode": "translate"}),
        objects.device_class("gpu.nvidia.com", extended_resource="nvidia.com/gpu"),
        objects.resource_slice("node-1", 4),
        objects.resource_slice("node-2", 4),
        objects.claim("train-0", "ml-research", count=2, allocated=True),
        objects.claim("train-1", "ml-research"),
        objects.claim("probe", "gpu-e2e"),
        objects.claim_template("one-gpu", "ml-research"),
        objects.quota("gpus", "ml-research"),
    ):
        server.put(obj)


def live_settings(kubeconfig: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {**FAST, **overrides}
    return Settings(cluster_source=ClusterSource.KUBECONFIG, kubeconfig=kubeconfig, **values)


async def eventually(check: Callable[[], object], what: str = "", timeout: float = 5.0) -> None:
    """Wait until `check()` (or the awaitable it returns) is true; fail naming `what` after
    `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.005)


RBAC_DOC = Path(__file__).resolve().parents[2] / "docs" / "rbac.md"
REPORT_ROLE = "dra-webhook-report"
Grant = tuple[str, str, str]
"""(apiGroup, resource, verb)"""


def documented_grants(name: str = "dra-webhook") -> set[Grant]:
    blocks = re.findall(r"```yaml\n(.*?)```", RBAC_DOC.read_text(), re.DOTALL)
    documents = [doc for block in blocks for doc in yaml.safe_load_all(block)]
    (role,) = [
        doc
        for doc in documents
        if doc.get("kind") == "ClusterRole" and doc["metadata"]["name"] == name
    ]
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
