"""The live source against the fake API server, through the real ClusterView."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cluster.live import LiveSource
from app.cluster.view import ClusterView, Kind
from app.config import Settings
from app.errors import TemplateConflictError, TemplateCreateError
from tests.cluster import objects
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.helpers import ROOMY, eventually, live_settings

pytestmark = pytest.mark.anyio

RCT = Kind.RESOURCE_CLAIM_TEMPLATE


def names(view: ClusterView, kind: Kind) -> set[str]:
    return {name for _, name in view.objects(kind)}


async def test_initial_sync_lists_every_kind_in_pages_then_watches_with_bookmarks(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    view = live.view
    assert view.synced
    assert names(view, Kind.NAMESPACE) == {"default", "gpu-e2e", "ml-research"}
    assert view.namespace_labels("gpu-e2e") is not None
    assert view.namespace_labels("gpu-e2e")["gpu-mode"] == "dra-only"  # type: ignore[index]
    assert view.device_class_for_extended_resource("nvidia.com/gpu") == "gpu.nvidia.com"
    assert set(view.resource_slices()) == {"node-1-gpu.nvidia.com-0", "node-2-gpu.nvidia.com-0"}
    assert set(view.in_namespace(Kind.RESOURCE_CLAIM, "ml-research")) == {"train-0", "train-1"}
    assert view.get(RCT, "one-gpu", "ml-research") is not None
    assert view.get(Kind.RESOURCE_QUOTA, "gpus", "ml-research") is not None

    # three namespaces in pages of two: a second page with the continue token
    lists = apiserver.queries(Kind.NAMESPACE, watch=False)
    assert [q.get("limit") for q in lists] == ["2", "2"]
    assert "continue" in lists[1]
    await eventually(lambda: apiserver.watching(Kind.NAMESPACE) == 1, "the namespace watch")
    (watch,) = apiserver.queries(Kind.NAMESPACE, watch=True)
    assert watch["allowWatchBookmarks"] == "true"
    assert watch["resourceVersion"] == str(apiserver.version)  # the list's resourceVersion
    assert all(live.stats.kinds[kind].lists == 1 for kind in Kind)


async def test_objects_in_the_view_keep_only_what_policies_read(live: LiveSource) -> None:
    ns = live.view.get(Kind.NAMESPACE, "gpu-e2e")
    assert ns is not None
    assert set(ns) == {"kind", "metadata"}
    assert set(ns["metadata"]) == {"name", "labels", "uid", "resourceVersion"}
    claim = live.view.get(Kind.RESOURCE_CLAIM, "train-0", "ml-research")
    assert claim is not None
    assert claim["kind"] == "ResourceClaim"
    assert claim["status"] == {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-1", "device": d}
                    for d in ("gpu-0", "gpu-1")
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "train-0-pod", "uid": "7d3a-pod"}],
    }
    assert "managedFields" not in claim["metadata"]
    assert "annotations" not in claim["metadata"]


async def test_watch_events_add_modify_and_delete_objects(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    view = live.view
    apiserver.put(objects.namespace("team-b", **{"gpu-mode": "translate"}))
    apiserver.put(objects.namespace("gpu-e2e", **{"gpu-mode": "audit"}))
    apiserver.delete(Kind.RESOURCE_CLAIM, "probe", "gpu-e2e")
    apiserver.put(objects.resource_slice("node-3", 2))

    await eventually(lambda: view.namespace_labels("team-b") is not None, "ADDED namespace")
    await eventually(
        lambda: (view.namespace_labels("gpu-e2e") or {}).get("gpu-mode") == "audit", "MODIFIED"
    )
    await eventually(lambda: view.get(Kind.RESOURCE_CLAIM, "probe", "gpu-e2e") is None, "DELETED")
    await eventually(lambda: "node-3-gpu.nvidia.com-0" in view.resource_slices(), "new slice")
    events = live.stats.kinds[Kind.NAMESPACE].events
    assert events["ADDED"] == 1
    assert events["MODIFIED"] == 1
    assert live.stats.kinds[Kind.RESOURCE_CLAIM].events["DELETED"] == 1
    assert all(live.stats.kinds[kind].relists == 0 for kind in Kind)


async def test_a_cut_watch_resumes_from_the_last_bookmark_without_relisting(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    await eventually(lambda: apiserver.watching(Kind.DEVICE_CLASS) == 1, "device class watch")
    apiserver.put(objects.namespace("elsewhere"))  # moves the global resourceVersion on
    apiserver.bookmark()
    await eventually(lambda: live.stats.kinds[Kind.DEVICE_CLASS].events["BOOKMARK"] == 1)
    bookmarked = str(apiserver.version)

    apiserver.drop_watches()
    await eventually(
        lambda: len(apiserver.queries(Kind.DEVICE_CLASS, watch=True)) == 2, "a second watch"
    )
    assert apiserver.queries(Kind.DEVICE_CLASS, watch=True)[1]["resourceVersion"] == bookmarked
    assert live.stats.kinds[Kind.DEVICE_CLASS].lists == 1
    assert live.stats.kinds[Kind.DEVICE_CLASS].errors >= 1
    assert not live.view.stale_kinds


async def test_a_silent_watch_is_reopened_from_where_it_was_without_counting_an_error(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    source = LiveSource(ClusterView(), live_settings(kubeconfig, watch_idle_seconds=0.1))
    await source.start()
    try:
        await eventually(lambda: len(apiserver.queries(Kind.DEVICE_CLASS, watch=True)) >= 3)
        first, second, *_ = apiserver.queries(Kind.DEVICE_CLASS, watch=True)
        assert first["resourceVersion"] == second["resourceVersion"]
        stats = source.stats.kinds[Kind.DEVICE_CLASS]
        assert stats.idle_reconnects >= 2
        assert stats.errors == 0
        assert stats.lists == 1
        assert not source.view.stale_kinds
    finally:
        await source.stop()


async def test_a_garbled_watch_stream_is_reopened_from_the_last_version_without_a_relist(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    await eventually(lambda: apiserver.watching(Kind.RESOURCE_SLICE) == 1, "the slice watch")
    apiserver.garble_watches()
    apiserver.put(objects.resource_slice("node-9", 1))
    await eventually(lambda: "node-9-gpu.nvidia.com-0" in live.view.resource_slices(), "resumed")
    stats = live.stats.kinds[Kind.RESOURCE_SLICE]
    assert stats.errors >= 1
    assert "JSONDecodeError" in stats.last_error
    assert stats.lists == 1


async def test_watches_that_break_as_soon_as_they_open_still_make_the_kind_stale(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    apiserver.broken_watches = True
    apiserver.drop_watches()
    await eventually(lambda: live.view.stale_kinds == frozenset(Kind), "stale despite the 200s")
    assert live.stats.kinds[Kind.NAMESPACE].errors >= 2
    apiserver.broken_watches = False
    await eventually(lambda: not live.view.stale_kinds, "fresh once a watch holds", timeout=10)


@pytest.mark.parametrize("as_http", [False, True], ids=["error-event", "http-status"])
async def test_410_gone_relists_and_objects_deleted_in_the_gap_disappear(
    live: LiveSource, apiserver: FakeApiServer, as_http: bool
) -> None:
    view = live.view
    apiserver.hold(Kind.RESOURCE_CLAIM)  # the watch falls behind...
    apiserver.delete(Kind.RESOURCE_CLAIM, "train-1", "ml-research")
    apiserver.delete(Kind.RESOURCE_CLAIM, "probe", "gpu-e2e")
    apiserver.put(objects.claim("train-2", "ml-research"))
    apiserver.compact()  # ...and the events it missed are compacted away
    apiserver.release(Kind.RESOURCE_CLAIM)
    assert names(view, Kind.RESOURCE_CLAIM) == {"train-0", "train-1", "probe"}

    if as_http:
        apiserver.gone_as_http = True
        apiserver.drop_watches()  # the re-watch from the old resourceVersion gets HTTP 410
    else:
        apiserver.expire_watches()  # ERROR event with a 410 Status, mid-stream

    await eventually(lambda: names(view, Kind.RESOURCE_CLAIM) == {"train-0", "train-2"}, "relist")
    stats = live.stats.kinds[Kind.RESOURCE_CLAIM]
    assert stats.relists >= 1
    assert stats.lists >= 2
    assert "410" in stats.last_error
    await eventually(lambda: stats.in_sync, "back in sync")
    # the other kinds were cut or expired too, and came back with nothing lost
    assert names(view, Kind.NAMESPACE) == {"default", "gpu-e2e", "ml-research"}
    assert not view.stale_kinds


async def test_an_expired_continue_token_restarts_the_list(
    apiserver: FakeApiServer, settings: Settings
) -> None:
    apiserver.expire_continue = True
    source = LiveSource(ClusterView(), settings)
    await source.start()
    try:
        await eventually(lambda: source.view.synced, "sync")
        assert names(source.view, Kind.NAMESPACE) == {"default", "gpu-e2e", "ml-research"}
        assert sum(live_lists(apiserver, kind) for kind in Kind) > len(Kind)
    finally:
        await source.stop()


def live_lists(server: FakeApiServer, kind: Kind) -> int:
    return len(server.queries(kind, watch=False))


async def test_the_view_survives_the_api_server_going_away_and_resyncs_when_it_is_back(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    settings = live_settings(apiserver.write_kubeconfig(tmp_path / "kubeconfig"), **ROOMY)
    live = LiveSource(ClusterView(), settings)
    await live.start()
    try:
        await _survives_and_resyncs(live, apiserver)
    finally:
        await live.stop()


async def _survives_and_resyncs(live: LiveSource, apiserver: FakeApiServer) -> None:
    view = live.view
    await eventually(lambda: not view.stale_kinds, "initial sync")
    await apiserver.stop()
    assert names(view, Kind.NAMESPACE) == {"default", "gpu-e2e", "ml-research"}  # last good state
    assert not view.stale_kinds  # within the bound, still trusted
    await eventually(lambda: view.stale_kinds == frozenset(Kind), "stale after the bound")
    assert names(view, Kind.RESOURCE_CLAIM) == {"train-0", "train-1", "probe"}
    assert all(not live.stats.kinds[kind].in_sync for kind in Kind)

    # while it was away: a namespace was deleted and the history compacted (etcd restored)
    apiserver.delete(Kind.NAMESPACE, "default")
    apiserver.put(objects.claim("late", "gpu-e2e"))
    apiserver.compact()
    await apiserver.start()

    await eventually(lambda: not view.stale_kinds, "fresh again", timeout=10)
    await eventually(lambda: names(view, Kind.NAMESPACE) == {"gpu-e2e", "ml-research"})
    await eventually(lambda: view.get(Kind.RESOURCE_CLAIM, "late", "gpu-e2e") is not None)
    assert live.stats.kinds[Kind.NAMESPACE].errors >= 1


async def test_a_source_that_cannot_list_a_kind_retries_and_keeps_it_stale(
    apiserver: FakeApiServer, settings: Settings
) -> None:
    apiserver.refuse[Kind.RESOURCE_QUOTA] = (403, "Forbidden")  # RBAC not granted yet
    source = LiveSource(ClusterView(), settings)
    await source.start()
    try:
        await eventually(lambda: source.stats.kinds[Kind.RESOURCE_QUOTA].errors >= 3, "retries")
        await eventually(lambda: source.view.stale_kinds == {Kind.RESOURCE_QUOTA}, "the others")
        assert "403 Forbidden" in source.stats.kinds[Kind.RESOURCE_QUOTA].last_error
        del apiserver.refuse[Kind.RESOURCE_QUOTA]
        await eventually(lambda: not source.view.stale_kinds, "granted")
        assert source.view.synced
    finally:
        await source.stop()


# -- the one write ---------------------------------------------------------------------------


async def test_a_created_template_is_in_the_view_before_its_watch_event_arrives(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    view = live.view
    apiserver.hold(RCT)  # its watch event is late
    await live.create_claim_template(objects.claim_template("gpu-x1", "ml-research"))

    created = view.get(RCT, "gpu-x1", "ml-research")
    assert created is not None
    assert created["metadata"]["uid"]  # the stored object, from the create's answer
    assert live.stats.kinds[RCT].events["ADDED"] == 0
    generation = view.generation(RCT)

    apiserver.release(RCT)  # the event arrives: the same version, nothing changes
    await eventually(lambda: live.stats.kinds[RCT].events["ADDED"] == 1, "the watch event")
    assert view.get(RCT, "gpu-x1", "ml-research") is created
    assert view.generation(RCT) == generation
    assert live.stats.templates_created == 1


async def test_a_watch_event_that_beats_the_create_answer_is_kept(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    view = live.view

    async def meanwhile(stored: dict[str, object]) -> None:
        # before the create is answered, its event arrives and someone labels the template
        await eventually(lambda: view.get(RCT, "gpu-x2", "ml-research") is not None, "event")
        newer = objects.claim_template("gpu-x2", "ml-research")
        newer["metadata"]["labels"]["team"] = "b"
        apiserver.put(newer)
        await eventually(
            lambda: (
                (view.get(RCT, "gpu-x2", "ml-research") or {})["metadata"]["labels"].get("team")
                == "b"
            ),
            "the MODIFIED event",
        )

    apiserver.before_create_response = meanwhile
    await live.create_claim_template(objects.claim_template("gpu-x2", "ml-research"))
    kept = view.get(RCT, "gpu-x2", "ml-research")
    assert kept is not None
    assert kept["metadata"]["labels"]["team"] == "b"  # the older create answer did not win


async def test_already_exists_is_success_and_puts_the_stored_template_in_the_view(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    apiserver.hold(RCT)  # another replica created it; our view has not seen it yet
    stored = apiserver.put(objects.claim_template("gpu-x3", "ml-research"))
    assert live.view.get(RCT, "gpu-x3", "ml-research") is None

    await live.create_claim_template(objects.claim_template("gpu-x3", "ml-research"))

    found = live.view.get(RCT, "gpu-x3", "ml-research")
    assert found is not None
    assert found["metadata"]["uid"] == stored["metadata"]["uid"]  # read back from the server
    assert live.stats.templates_existing == 1
    assert live.stats.templates_created == 0


async def test_already_exists_with_other_content_raises_a_conflict_and_is_not_taken_as_ours(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    apiserver.hold(RCT)  # someone else created it; our view has not seen it yet
    forged = objects.claim_template("gpu-x7", "ml-research")
    forged["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    apiserver.put(forged)

    with pytest.raises(TemplateConflictError, match="its spec is not the one dra-webhook builds"):
        await live.create_claim_template(objects.claim_template("gpu-x7", "ml-research"))

    held = live.view.get(RCT, "gpu-x7", "ml-research")  # what is stored, for the next admission
    assert held is not None
    assert held["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] == "All"
    assert (live.stats.templates_existing, live.stats.template_errors) == (0, 1)


async def test_already_exists_without_our_label_raises_a_conflict(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    apiserver.hold(RCT)
    unlabelled = objects.claim_template("gpu-x8", "ml-research")
    del unlabelled["metadata"]["labels"]
    apiserver.put(unlabelled)
    with pytest.raises(TemplateConflictError, match=r"not labelled app\.kubernetes\.io/managed-by"):
        await live.create_claim_template(objects.claim_template("gpu-x8", "ml-research"))


async def test_already_exists_as_the_api_server_stores_our_template_is_success(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    apiserver.hold(RCT)
    stored = objects.claim_template("gpu-x9", "ml-research")
    stored["spec"] = {"metadata": {}, **stored["spec"]}  # as kube-apiserver returns it
    apiserver.put(stored)
    await live.create_claim_template(objects.claim_template("gpu-x9", "ml-research"))
    assert live.view.get(RCT, "gpu-x9", "ml-research") is not None
    assert live.stats.templates_existing == 1


async def test_already_exists_but_unreadable_raises_and_is_not_taken_on_trust(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    apiserver.create_error = (409, "AlreadyExists", '"gpu-x10" already exists')  # then gone: 404
    with pytest.raises(TemplateCreateError, match="could not be read back") as caught:
        await live.create_claim_template(objects.claim_template("gpu-x10", "ml-research"))
    assert not isinstance(caught.value, TemplateConflictError)
    assert "404 NotFound" in str(caught.value)
    assert live.view.get(RCT, "gpu-x10", "ml-research") is None
    assert live.stats.template_errors == 1


async def test_a_refused_create_raises_with_the_api_servers_message(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    apiserver.create_error = (
        403,
        "Forbidden",
        'resourceclaimtemplates.resource.k8s.io is forbidden: User "system:serviceaccount:'
        'dra-webhook:dra-webhook" cannot create resource "resourceclaimtemplates"',
    )
    with pytest.raises(TemplateCreateError, match="403 Forbidden: resourceclaimtemplates"):
        await live.create_claim_template(objects.claim_template("gpu-x4", "ml-research"))
    assert live.view.get(RCT, "gpu-x4", "ml-research") is None
    assert live.stats.template_errors == 1


async def test_a_create_while_the_api_server_is_away_raises_template_create_error(
    live: LiveSource, apiserver: FakeApiServer
) -> None:
    await apiserver.stop()
    with pytest.raises(TemplateCreateError, match="unreachable"):
        await live.create_claim_template(objects.claim_template("gpu-x5", "ml-research"))


async def test_a_create_before_start_raises_template_create_error(settings: Settings) -> None:
    source = LiveSource(ClusterView(), settings)
    with pytest.raises(TemplateCreateError, match="not started"):
        await source.create_claim_template(objects.claim_template("gpu-x6", "ml-research"))


async def test_a_kubeconfig_with_the_wrong_token_never_syncs(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    path = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    path.write_text(path.read_text().replace("fake-apiserver-token", "wrong"))
    source = LiveSource(ClusterView(), live_settings(path))
    await source.start()
    try:
        await eventually(lambda: source.stats.kinds[Kind.NAMESPACE].errors >= 2, "401s")
        assert "401 Unauthorized" in source.stats.kinds[Kind.NAMESPACE].last_error
        assert source.view.stale_kinds == frozenset(Kind)
        assert not source.view.synced
    finally:
        await source.stop()
