"""docs/rbac.md grants exactly what the code uses: every request the live source makes is allowed,
and nothing beyond get/list/watch on the six kinds and priorityclasses, list/watch on nodes
(their labels, read as metadata), pods (the holders of claims) and podgroups (their group claims), and create, patch and delete on resourceclaimtemplates (translation's templates: made, touched, garbage-collected); the report's
role is exactly what `dra-webhook report --policy-reports` asks for, and the webhook's gauge of
the report's PolicyReports lists them and does nothing else."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.cli import main
from app.cluster.listing import Cluster, connect
from app.cluster.live import LiveSource
from app.cluster.progress import MigrationProgress
from app.cluster.view import ClusterView, Kind
from app.config import Settings
from app.workloads import builtin
from tests.cluster import objects
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.helpers import RBAC_DOC, REPORT_ROLE, Grant, documented_grants, eventually
from tests.operators import namespaced_plurals
from tests.policies import taint_objects
from tests.report.helpers import Running, seed

VIEW_KINDS = {
    ("", "namespaces"),
    ("", "resourcequotas"),
    ("resource.k8s.io", "deviceclasses"),
    ("resource.k8s.io", "resourceslices"),
    ("resource.k8s.io", "resourceclaims"),
    ("resource.k8s.io", "resourceclaimtemplates"),
}
NODE_READS = {("", "nodes", "list"), ("", "nodes", "watch")}
PRIORITY_READS = {("scheduling.k8s.io", "priorityclasses", v) for v in ("get", "list", "watch")}
POD_READS = {("", "pods", "list"), ("", "pods", "watch")}
POD_GROUP_READS = {("scheduling.k8s.io", "podgroups", v) for v in ("list", "watch")}
TEMPLATE_WRITES = ("create", "patch", "delete")


def needed(method: str, path: str, query: dict[str, str]) -> Grant | None:
    """The RBAC verb and resource a request to the API needs (None: discovery, which every
    authenticated identity may read through the system:discovery role)."""
    parts = path.strip("/").split("/")
    if (parts[0] == "apis" and len(parts) <= 3) or path == "/version":
        return None
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]  # /namespaces/{ns}/<resource>[/<name>]
    resource = rest[0]
    if method == "POST":
        return group, resource, "create"
    if method in ("PATCH", "DELETE"):
        return group, resource, method.lower()
    if len(rest) == 2:
        return group, resource, "get"
    return group, resource, "watch" if query.get("watch") == "true" else "list"


def test_the_documented_role_grants_read_on_six_kinds_nodes_priorities_groups_and_writes_templates() -> (
    None
):
    expected = {(g, r, v) for g, r in VIEW_KINDS for v in ("get", "list", "watch")} | NODE_READS
    expected |= PRIORITY_READS | POD_READS | POD_GROUP_READS
    expected |= {("resource.k8s.io", "resourceclaimtemplates", v) for v in TEMPLATE_WRITES}
    assert documented_grants() == expected


@pytest.mark.anyio
async def test_every_request_the_live_source_makes_is_allowed_by_the_documented_role(
    apiserver: FakeApiServer, settings: Settings
) -> None:
    source = LiveSource(ClusterView(), settings)
    await source.start()
    try:
        await eventually(lambda: source.view.synced, "sync")
        await eventually(lambda: len({p for _, p, q in apiserver.requests if "watch" in q}) == 10)
        await source.create_claim_template(objects.claim_template("new", "ml-research"))
        await source.create_claim_template(objects.claim_template("one-gpu", "ml-research"))
        assert await source.touch_claim_template("ml-research", "one-gpu")
        template = source.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, "new", "ml-research")
        assert template is not None
        assert await source.delete_claim_template(template) == "deleted"
    finally:
        await source.stop()
    made = [*apiserver.requests, *(("POST", path, {}) for path in apiserver.dry_runs)]
    used = {needed(method, path, query) for method, path, query in made} - {None}
    assert used <= documented_grants()
    assert {verb for _, _, verb in used} == {"list", "watch", "create", "get", "patch", "delete"}


def _operator_kinds() -> list[tuple[str, str, str]]:
    """The catalogue's operator kinds that the chart sends and the report role lists (their
    plurals from the operators' CRDs in the test data: without them the test skips)."""
    plurals = namespaced_plurals()
    return [
        (entry.group, entry.kind, plurals[(entry.group, entry.kind)])
        for entry in builtin().entries()
        if not entry.built_in and (entry.group, entry.kind) in plurals
    ]


def test_the_report_needs_exactly_the_documented_report_role(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    operator_kinds = _operator_kinds()
    with Running() as cluster:
        seed(cluster)
        for group, kind, plural in operator_kinds:  # every operator installed: all are listed
            cluster.serve_kind(group, kind, plural, [])
        cluster.serve_group_claims([])  # the Workload API on: workloads and podgroups listed
        # a DeviceTaintRule in force: the rules, and the slices they select, are listed
        rule = taint_objects.rule("drain", {"pool": "node-a"})
        cluster.serve_kind("resource.k8s.io", "DeviceTaintRule", "devicetaintrules", [rule],
                           namespaced=False)  # fmt: skip
        cluster.serve("/apis/resource.k8s.io/v1/resourceslices", 0, lambda i: {})
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        assert main(["report", "--kubeconfig", str(kubeconfig), "--policy-reports"]) == 0
        requests = list(cluster.requests)
    capsys.readouterr()
    used = {needed(method, path, query) for method, path, query in requests} - {None}
    # An apply that creates the report is also checked for `create` by the API server (the
    # test server does not model that check; tests/e2e/test_report.py meets the real one).
    used.add(("wgpolicyk8s.io", "policyreports", "create"))
    assert used == documented_grants(REPORT_ROLE)


def test_the_webhooks_gauge_only_lists_policy_reports(tmp_path: Path) -> None:
    with Running() as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")

        async def read() -> None:
            progress = MigrationProgress(lambda: connect(kubeconfig), interval=1)
            client = Cluster(await connect(kubeconfig))
            try:
                await progress.read(client)
            finally:
                await client.close()

        asyncio.run(read())
        requests = list(cluster.requests)
    assert {needed(m, p, q) for m, p, q in requests} == {
        ("wgpolicyk8s.io", "policyreports", "list")
    }
    assert (
        "wgpolicyk8s.io" in RBAC_DOC.read_text().split("**The webhook's gauge of the report.**")[1]
    )
