"""Claim quotas on pods and workloads (c): all of an object's pods against the namespace's
limits and native ResourceQuotas, owners charged once, and the forecast of what translation
will give a pod."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from app.cluster.view import Kind
from app.pipeline import Decision, Endpoint, Pipeline
from app.policies.base import Context, Mode
from app.policies.quota.demand import pod_demand
from tests.claim_objects import cluster_objects, workload
from tests.helpers import make_pipeline, policy_from
from tests.policies.quota.helpers import RESEARCH, Obj, decide, research_policy
from tests.specs import pod_spec

# -- the scenario of the issue: 12 devices in use, limit 16 --------------------------------


def test_a_deployment_of_8_replicas_x_4_devices_is_denied_with_the_arithmetic(
    research: Pipeline,
) -> None:
    decision = decide(research, workload("Deployment", "trainer", 8, templates=("four-gpus",)))
    assert not decision.allowed
    assert (
        "Deployment trainer needs 8 replicas x 4 devices of gpu.nvidia.com = 32; namespace "
        "ml-research allows 16, 12 in use (quota research)" in decision.message
    )


def test_the_same_deployment_under_a_warn_entry_is_allowed_with_the_warning() -> None:
    pipeline = make_pipeline(cluster_objects(), research_policy("warn"))
    decision = decide(pipeline, workload("Deployment", "trainer", 8, templates=("four-gpus",)))
    assert decision.allowed
    assert any(
        "Deployment trainer needs 8 replicas x 4 devices of gpu.nvidia.com = 32; namespace "
        "ml-research allows 16, 12 in use (quota research); allowed (warn only)" in w
        for w in decision.warnings
    ), decision.warnings


# -- c. Pods and workloads -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(workload("Pod", "p", templates=("four-gpus",)), "", id="pod-4-fits"),
        pytest.param(
            workload("Pod", "p", templates=("four-gpus", "one-gpu")),
            "Pod p needs 5 devices of gpu.nvidia.com; namespace ml-research allows 16, 12 in use",
            id="pod-5",
        ),
        pytest.param(
            workload("StatefulSet", "db", 2, templates=("four-gpus",)),
            "StatefulSet db needs 2 replicas x 4 devices of gpu.nvidia.com = 8; namespace "
            "ml-research allows 16, 12 in use",
            id="statefulset",
        ),
        pytest.param(
            workload("ReplicaSet", "rs", 5, templates=("one-gpu",)),
            "ReplicaSet rs needs 5 replicas x 1 device of gpu.nvidia.com = 5",
            id="replicaset",
        ),
        pytest.param(workload("Deployment", "d", 4, templates=("one-gpu",)), "", id="deploy-fits"),
        pytest.param(
            workload("Deployment", "d", 0, templates=("four-gpus",)), "", id="scaled-to-0"
        ),
        pytest.param(
            workload("Deployment", "d", None, templates=("four-gpus", "four-gpus")),
            "Deployment d needs 1 replica x 8 devices of gpu.nvidia.com = 8",
            id="replicas-default-1",
        ),
        pytest.param(
            workload("Job", "j", 3, templates=("four-gpus",)),
            "Job j needs 3 parallel pods x 4 devices of gpu.nvidia.com = 12",
            id="job-parallelism",
        ),
        pytest.param(
            workload("CronJob", "cj", 2, templates=("four-gpus",)),
            "CronJob cj needs 2 parallel pods x 4 devices of gpu.nvidia.com = 8",
            id="cronjob-job-template",
        ),
        pytest.param(
            workload("Deployment", "shared", 8, claims=("train-a",)), "", id="shared-claim-no-new"
        ),
        pytest.param(
            workload("Deployment", "unknown", 8, templates=("missing",)), "", id="unknown-template"
        ),
        pytest.param(
            workload("Deployment", "legacy", 2, legacy={"nvidia.com/gpu": "4"}),
            "Deployment legacy needs 2 replicas x 4 devices of gpu.nvidia.com = 8; namespace "
            "ml-research allows 16, 12 in use",
            id="translate-legacy-workload",
        ),
        pytest.param(
            workload("Pod", "legacy", legacy={"nvidia.com/gpu": 9}),
            "spec.containers[0].resources.limits[nvidia.com/gpu]: container main asks for "
            "nvidia.com/gpu: 9, which translation turns into a claim for 9 devices of "
            "gpu.nvidia.com; at most 8 per request",
            id="translate-legacy-per-request",
        ),
    ],
)
def test_pods_and_workloads_are_checked_against_the_namespace_limit(
    research: Pipeline, obj: Obj, expected: str
) -> None:
    decision = decide(research, obj)
    assert decision.allowed is (not expected), decision.message
    assert expected in decision.message


def test_a_daemonset_is_counted_per_node_and_only_warned(research: Pipeline) -> None:
    decision = decide(research, workload("DaemonSet", "agent", templates=("four-gpus",)))
    assert decision.allowed
    assert any(
        "DaemonSet agent needs 4 devices of gpu.nvidia.com per node x 2 nodes with devices = 8; "
        "namespace ml-research allows 16, 12 in use (quota research); allowed (warn only)" in w
        for w in decision.warnings
    ), decision.warnings


def test_a_scale_up_is_charged_only_for_the_pods_it_adds(research: Pipeline) -> None:
    old = workload("Deployment", "d", 2, templates=("one-gpu",))
    ok = decide(
        research,
        workload("Deployment", "d", 6, templates=("one-gpu",)),
        operation="UPDATE",
        old=old,
    )
    assert ok.allowed, ok.message
    over = decide(
        research,
        workload("Deployment", "d", 7, templates=("one-gpu",)),
        operation="UPDATE",
        old=old,
    )
    assert not over.allowed
    assert "= 7 (2 before this change)" in over.message
    down = decide(
        research,
        old,
        operation="UPDATE",
        old=workload("Deployment", "d", 9, templates=("one-gpu",)),
    )
    assert down.allowed


def test_workload_claims_count_against_the_claim_limit() -> None:
    policy = policy_from(
        RESEARCH.replace("ACTION", "deny").replace("Namespace: 10", "Namespace: 5")
    )
    pipeline = make_pipeline(cluster_objects(), policy)
    decision = decide(pipeline, workload("Deployment", "d", 3, templates=("one-gpu",)))
    assert not decision.allowed
    assert (
        "Deployment d makes 3 replicas x 1 ResourceClaims = 3; namespace ml-research allows 5, "
        "3 in use" in decision.message
    )


@pytest.mark.parametrize(
    ("setting", "allowed", "warned"),
    [("deny", False, False), ("warn", True, True), ("ignore", True, False)],
)
def test_native_resource_quota_hard_values_are_checked_for_workloads(
    setting: str, allowed: bool, warned: bool
) -> None:
    pipeline = make_pipeline(cluster_objects(), policy_from(f"resourceQuotas: {setting}\n"))
    decision = decide(
        pipeline, workload("Deployment", "d", 4, templates=("two-gpus",), namespace="ml-quota")
    )
    text = (
        "Deployment d needs 4 replicas x 2 devices of gpu.nvidia.com = 8; ResourceQuota gpus "
        "allows 8 (gpu.nvidia.com.deviceclass.resource.k8s.io/devices), 2 in use"
    )
    assert decision.allowed is allowed
    assert (text in decision.message) is (not allowed)
    assert any(text in w for w in decision.warnings) is warned
    fits = decide(
        pipeline, workload("Deployment", "d", 3, templates=("two-gpus",), namespace="ml-quota")
    )
    assert fits.allowed and fits.warnings == ()


def test_resource_quota_used_is_the_larger_of_its_status_and_the_webhooks_count() -> None:
    objects = cluster_objects()
    quota = next(o for o in objects if o["kind"] == "ResourceQuota")
    quota["status"]["used"]["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] = "6"
    decision = decide(
        make_pipeline(objects),
        workload("Pod", "p", templates=("two-gpus", "two-gpus"), namespace="ml-quota"),
    )
    assert (
        "allows 8 (gpu.nvidia.com.deviceclass.resource.k8s.io/devices), 6 in use"
        in decision.message
    )


def test_a_pod_update_is_not_recounted(research: Pipeline) -> None:
    pod = workload("Pod", "p", templates=("four-gpus", "four-gpus"))
    assert decide(research, pod, operation="UPDATE", old=pod).allowed


# -- objects made by a controller whose own admission charged them ---------------------------


def owned(obj: Obj, api_version: str, kind: str, *, controller: bool = True) -> Obj:
    """`obj` with a controller ownerReference, as the controller that made it writes it."""
    ref = {"apiVersion": api_version, "kind": kind, "name": "web", "uid": "u-1"}
    ref["controller"] = controller
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


@pytest.fixture
def full_quota() -> Pipeline:
    """ml-quota at its ResourceQuota: 8 of 8 devices used (the running claim and Deployment web,
    3 replicas x 2 devices)."""
    objects = cluster_objects()
    resource_quota = next(o for o in objects if o["kind"] == "ResourceQuota")
    resource_quota["status"]["used"]["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] = "8"
    return make_pipeline(objects)


def quota_workload(kind: str, count: int, image: str = "v2") -> Obj:
    obj = workload(kind, "web", count, templates=("two-gpus",), namespace="ml-quota")
    spec = obj["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else obj["spec"]
    pod = spec if kind == "Pod" else spec["template"]["spec"]
    pod["containers"][0]["image"] = image
    return obj


def test_a_rolling_update_at_the_resource_quota_is_not_stalled(full_quota: Pipeline) -> None:
    deployment_v1 = quota_workload("Deployment", 3, "v1")
    deployment_v2 = quota_workload("Deployment", 3, "v2")
    bump = decide(full_quota, deployment_v2, operation="UPDATE", old=deployment_v1)
    assert bump.allowed, bump.message

    # The deployment controller creates the new ReplicaSet (maxSurge 1), then scales it up
    # while it scales the old one down.
    new_rs = owned(quota_workload("ReplicaSet", 1), "apps/v1", "Deployment")
    created = decide(full_quota, new_rs)
    assert created.allowed, created.message
    assert created.warnings == ()
    scaled = owned(quota_workload("ReplicaSet", 3), "apps/v1", "Deployment")
    up = decide(full_quota, scaled, operation="UPDATE", old=new_rs)
    assert up.allowed, up.message
    old_rs = owned(quota_workload("ReplicaSet", 3, "v1"), "apps/v1", "Deployment")
    down = owned(quota_workload("ReplicaSet", 1, "v1"), "apps/v1", "Deployment")
    assert decide(full_quota, down, operation="UPDATE", old=old_rs).allowed

    # ...and the ReplicaSet controller creates the pods.
    pod = owned(quota_workload("Pod", 1), "apps/v1", "ReplicaSet")
    assert decide(full_quota, pod).allowed

    # Scaling the Deployment itself past the quota is still denied, at the Deployment.
    more = decide(
        full_quota, quota_workload("Deployment", 4), operation="UPDATE", old=deployment_v2
    )
    assert not more.allowed
    assert "ResourceQuota gpus allows 8" in more.message


@pytest.mark.parametrize(
    ("kind", "owner_api", "owner_kind"),
    [
        ("ReplicaSet", "apps/v1", "Deployment"),
        ("Job", "batch/v1", "CronJob"),
        ("Pod", "apps/v1", "ReplicaSet"),
        ("Pod", "apps/v1", "StatefulSet"),
        ("Pod", "apps/v1", "DaemonSet"),
        ("Pod", "batch/v1", "Job"),
        ("Pod", "v1", "ReplicationController"),
    ],
)
def test_an_object_made_by_a_checked_controller_is_not_charged_again(
    full_quota: Pipeline, kind: str, owner_api: str, owner_kind: str
) -> None:
    unowned = decide(full_quota, quota_workload(kind, 1))
    assert not unowned.allowed
    assert "ResourceQuota gpus allows 8" in unowned.message
    decision = decide(full_quota, owned(quota_workload(kind, 1), owner_api, owner_kind))
    assert decision.allowed, decision.message
    assert decision.warnings == ()


@pytest.mark.parametrize(
    ("kind", "owner_api", "owner_kind", "controller"),
    [
        pytest.param("ReplicaSet", "apps/v1", "Deployment", False, id="not-the-controller"),
        pytest.param("ReplicaSet", "example.com/v1", "Deployment", True, id="other-group"),
        pytest.param("Job", "batch/v1", "Job", True, id="kind-not-an-owner-of-jobs"),
        pytest.param(
            "Pod", "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", True, id="unchecked-kind"
        ),
        pytest.param("Deployment", "apps/v1", "Deployment", True, id="deployments-always"),
    ],
)
def test_an_object_whose_controller_this_webhook_does_not_charge_is_charged(
    full_quota: Pipeline, kind: str, owner_api: str, owner_kind: str, controller: bool
) -> None:
    obj = owned(quota_workload(kind, 1), owner_api, owner_kind, controller=controller)
    decision = decide(full_quota, obj)
    assert not decision.allowed
    assert "ResourceQuota gpus allows 8" in decision.message


def test_per_request_limits_still_apply_to_an_object_made_by_a_controller(
    research: Pipeline,
) -> None:
    rs = owned(
        workload("ReplicaSet", "rs", 1, legacy={"nvidia.com/gpu": 9}), "apps/v1", "Deployment"
    )
    decision = decide(research, rs)
    assert not decision.allowed
    assert (
        "which translation turns into a claim for 9 devices of gpu.nvidia.com; at most 8 per request"
        in decision.message
    )
    assert "allows 16" not in decision.message


def test_the_check_is_deterministic_and_leaves_the_object_alone(research: Pipeline) -> None:
    obj = workload("Deployment", "trainer", 8, templates=("four-gpus",))
    before = copy.deepcopy(obj)
    first_decision = decide(research, obj)
    assert decide(research, obj) == first_decision
    assert obj == before


@pytest.mark.parametrize(
    ("hard", "allowed"),
    [("8", False), (8, False), ("1k", True), ("7.5", True), ("lots", True), ("10", True)],
)
def test_resource_quota_hard_values_are_read_as_quantities(hard: Any, allowed: bool) -> None:
    objects = cluster_objects()
    quota = next(o for o in objects if o["kind"] == "ResourceQuota")
    quota["spec"]["hard"]["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] = hard
    deployment = workload("Deployment", "d", 4, templates=("two-gpus",), namespace="ml-quota")
    assert decide(make_pipeline(objects), deployment).allowed is allowed


def test_a_daemonset_in_a_cluster_without_device_nodes_is_counted_for_one_node() -> None:
    objects = [o for o in cluster_objects() if o["kind"] != "ResourceSlice"]
    pipeline = make_pipeline(objects, research_policy())
    decision = decide(pipeline, workload("DaemonSet", "agent", templates=("four-gpus", "one-gpu")))
    assert decision.allowed
    assert "per node x 1 node with devices = 5;" in decision.warnings[0]


# -- the forecast for translate-mode pods matches what translation does ---------------------

ZERO = """
quotas:
  - name: zero
    namespaceSelector: {matchLabels: {team: research}}
    maxDevicesPerNamespace: {"*": 0}
    maxClaimsPerNamespace: 0
"""


def _gpu(name: str, count: int, *, sidecar: bool = False) -> Obj:
    container: Obj = {
        "name": name,
        "image": "registry.example.com/cuda:12",
        "resources": {"limits": {"nvidia.com/gpu": str(count)}},
    }
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def _legacy_pod(init: list[Obj], app: list[Obj]) -> Obj:
    spec: Obj = {"containers": app or [{"name": "main", "image": "registry.example.com/x:1"}]}
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml-research"},
        "spec": spec,
    }


def _forecast(pipeline: Pipeline, pod: Obj) -> tuple[int, int]:
    """(devices of gpu.nvidia.com, claims) quota counts for one pod, read from its forecast."""
    spec = pod_spec("Pod", pod)
    assert spec is not None
    labels = pipeline.view.namespace_labels("ml-research")
    assert labels is not None
    ctx = Context(pipeline.view, pipeline.policy, pipeline.parts, Mode.TRANSLATE, labels)
    demand = pod_demand(spec, "ml-research", ctx)
    assert set(demand.devices) <= {"gpu.nvidia.com"}
    return demand.devices.get("gpu.nvidia.com", 0), demand.claims


def _assert_denied_with(decision: Decision, devices: int, claims: int) -> None:
    """The denial carries the forecast's arithmetic (the zero quota denies any device)."""
    assert not decision.allowed
    unit = "device" if devices == 1 else "devices"
    assert f"Pod p needs {devices} {unit} of gpu.nvidia.com;" in decision.message
    assert f"x {claims} ResourceClaims = {claims};" in decision.message


@pytest.mark.parametrize("init_mode", ["share", "separate"])
@pytest.mark.parametrize(
    ("init", "app"),
    [
        pytest.param([_gpu("warm", 1)], [_gpu("cuda", 1)], id="warm1-cuda1"),
        pytest.param([_gpu("warm", 1)], [_gpu("cuda", 2)], id="warm1-cuda2"),
        pytest.param([_gpu("warm", 1)], [_gpu("big", 2), _gpu("small", 1)], id="warm1-big2-small1"),
        pytest.param([_gpu("warm", 2)], [_gpu("cuda", 1)], id="warm2-cuda1-top-up"),
        pytest.param(
            [_gpu("one", 1), _gpu("three", 3), _gpu("four", 4)],
            [_gpu("cuda", 2)],
            id="three-inits-one-top-up",
        ),
        pytest.param([_gpu("one", 1), _gpu("two", 2)], [], id="two-inits-no-app"),
        pytest.param([_gpu("proxy", 1, sidecar=True), _gpu("warm", 2)], [], id="sidecar-then-init"),
        pytest.param([_gpu("warm", 1), _gpu("proxy", 1, sidecar=True)], [], id="init-then-sidecar"),
    ],
)
def test_the_quota_forecast_for_a_legacy_pod_matches_the_claims_translation_makes(
    init: list[Obj], app: list[Obj], init_mode: str
) -> None:
    policy = policy_from(ZERO + f"translation: {{initContainers: {init_mode}}}\n")
    pipeline = make_pipeline(cluster_objects(), policy)
    pod = _legacy_pod(init, app)
    forecast = _forecast(pipeline, pod)
    _assert_denied_with(decide(pipeline, pod), *forecast)
    # the pod's mutating call in a translate namespace is its only one: denied there too
    _assert_denied_with(decide(pipeline, pod, endpoint=Endpoint.MUTATE), *forecast)

    unlimited = make_pipeline(
        cluster_objects(), policy_from(f"translation: {{initContainers: {init_mode}}}\n")
    )
    mutated = decide(unlimited, pod, endpoint=Endpoint.MUTATE)
    assert mutated.allowed and mutated.patch, mutated.message
    for made in mutated.templates:  # as the transport creates them before answering
        pipeline.view.apply(Kind.RESOURCE_CLAIM_TEMPLATE, made)
    translated = jsonpatch.apply_patch(pod, list(mutated.patch))
    counts = {t["metadata"]["name"]: t["spec"]["spec"] for t in mutated.templates}
    entries = translated["spec"]["resourceClaims"]
    made_devices = sum(
        counts[e["resourceClaimTemplateName"]]["devices"]["requests"][0]["exactly"]["count"]
        for e in entries
    )
    assert forecast == (made_devices, len(entries))
    assert _forecast(pipeline, translated) == forecast
    _assert_denied_with(decide(pipeline, translated), *forecast)
