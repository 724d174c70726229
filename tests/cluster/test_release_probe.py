"""The live source learns the release and what its API server keeps (app.cluster.probe): at
start, again after a relist, and conservatively while it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cluster.live import LiveSource
from app.cluster.release import Feature
from app.cluster.view import ClusterView, Kind
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.helpers import eventually, live_settings

pytestmark = pytest.mark.anyio

GATED = frozenset({Feature.CONSUMABLE_CAPACITY, Feature.DEVICE_TAINTS})


async def _started(apiserver: FakeApiServer, tmp_path: Path) -> LiveSource:
    settings = live_settings(apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    source = LiveSource(ClusterView(), settings)
    await source.start()
    return source


async def test_a_release_that_keeps_every_field_is_probed_as_such(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    source = await _started(apiserver, tmp_path)
    try:
        release = source.view.release
        assert release.version == "v1.36.2"
        assert release.source == "probed"
        assert release.resource_versions == ("v1",)
        assert release.taint_rules == ()  # 1.36 serves DeviceTaintRule only in opted-in versions
        assert all(release.keeps(f) for f in GATED | {Feature.ADMIN_ACCESS})
        templates = "/apis/resource.k8s.io/v1/namespaces/dra-webhook/resourceclaimtemplates"
        assert apiserver.dry_runs == [templates] * 2
        assert "POST" not in [m for m, _, _ in apiserver.requests]
        assert all(
            t["metadata"]["name"] != "dra-webhook-release-probe"
            for t in apiserver.store_of_templates()
        )
    finally:
        await source.stop()


async def test_fields_the_api_server_drops_are_not_kept_whatever_the_version_says(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.git_version = "v1.36.2"  # a 1.36 with the gates turned off: the probe is the truth
    apiserver.drops = GATED
    source = await _started(apiserver, tmp_path)
    try:
        release = source.view.release
        assert not release.keeps(Feature.CONSUMABLE_CAPACITY)
        assert not release.keeps(Feature.DEVICE_TAINTS)
        assert release.keeps(Feature.PRIORITIZED_LIST)
    finally:
        await source.stop()


async def test_a_relist_probes_again_and_sees_an_upgrade(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.git_version, apiserver.drops = "v1.35.8", GATED
    source = await _started(apiserver, tmp_path)
    try:
        await eventually(lambda: not source.view.stale_kinds, "initial sync")
        assert source.view.release.version == "v1.35.8"
        apiserver.git_version, apiserver.drops = "v1.36.5", frozenset()
        apiserver.compact()
        apiserver.expire_watches()
        await eventually(
            lambda: source.view.release.version == "v1.36.5", "the release probed again"
        )
        assert source.view.release.keeps(Feature.CONSUMABLE_CAPACITY)
    finally:
        await source.stop()


async def test_without_a_version_nothing_gated_is_kept_until_the_probe_succeeds(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.refuse_version = True
    source = await _started(apiserver, tmp_path)
    try:
        assert not source.view.release.keeps(Feature.CONSUMABLE_CAPACITY)
        assert source.view.release.version == ""
        apiserver.refuse_version = False
        await eventually(lambda: source.view.release.source == "probed", "a retried probe")
    finally:
        await source.stop()


async def test_a_version_that_is_no_kubernetes_release_is_a_failed_probe_not_a_dead_task(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.git_version = "not-a-release"
    source = await _started(apiserver, tmp_path)
    try:
        assert source.view.release.version == ""
        assert not source.view.release.keeps(Feature.CONSUMABLE_CAPACITY)
        apiserver.git_version = "v1.36.5"
        await eventually(lambda: source.view.release.version == "v1.36.5", "a retried probe")
    finally:
        await source.stop()


async def test_the_scheduling_versions_that_serve_pod_groups_are_learned_from_discovery(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.git_version = "v1.37.2"
    apiserver.group_versions = ("v1alpha3", "v1beta1")
    source = await _started(apiserver, tmp_path)
    try:
        assert source.view.release.group_versions == ("v1beta1", "v1alpha3")
        await eventually(lambda: not source.view.stale_kinds, "initial sync")
        paths = [p for m, p, _ in apiserver.requests if m == "GET"]
        assert "/apis/scheduling.k8s.io/v1beta1/podgroups" in paths
    finally:
        await source.stop()


async def test_a_release_that_serves_no_pod_groups_has_none_and_stays_ready(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.group_versions = ()
    source = await _started(apiserver, tmp_path)
    try:
        assert source.view.release.group_versions == ()
        await eventually(lambda: source.view.synced and not source.view.stale_kinds, "ready")
        assert not source.view.objects(Kind.POD_GROUP)
    finally:
        await source.stop()


async def test_the_versions_that_serve_device_taint_rules_are_read_from_discovery(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.taint_rule_versions = ("v1beta2",)  # 1.36 with --runtime-config v1beta2
    source = await _started(apiserver, tmp_path)
    try:
        assert source.view.release.taint_rules == ("v1beta2",)
        assert source.view.release.describe()["device_taint_rules"] == ["v1beta2"]
    finally:
        await source.stop()
