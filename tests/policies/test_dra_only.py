"""dra-only and audit namespaces, through the pipeline (policy tests: no HTTP)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.pipeline import Decision, Endpoint
from app.transport.review import decode_review
from tests.allocation.nvidia import node_slice
from tests.dra_only_cases import CASES, GPU, WORKLOADS, Case, container, template_path
from tests.helpers import decide, make_pipeline, namespace, policy_from, wrap


def pod(ns: str = "gpu-e2e", **spec: Any) -> dict[str, Any]:
    spec.setdefault("containers", [container("app")])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns},
        "spec": spec,
    }


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_container_kind_and_spelling_is_denied_in_a_dra_only_namespace(case: Case) -> None:
    """The shared table (tests/dra_only_cases.py), which the chart's ValidatingAdmissionPolicy
    must agree with: denied naming every offence's path, container and resource, or allowed."""
    decision = decide(pod(**case.spec))
    assert decision.allowed is not case.denied
    if not case.denied:
        return
    assert decision.code == 403
    assert decision.denied_by == ("dra-only",)
    for offence in case.offences:
        assert f"- {offence.path}: " in decision.message
        assert f" {offence.container} asks for {offence.resource}: " in decision.message


@pytest.mark.parametrize(("api_version", "kind"), list(WORKLOADS))
def test_workload_pod_templates_are_denied_at_their_template_path(
    api_version: str, kind: str
) -> None:
    pod_spec = {"containers": [container("train", limits={GPU: "4"})]}
    obj = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "w", "namespace": "gpu-e2e"},
        "spec": WORKLOADS[(api_version, kind)](pod_spec),
    }
    decision = decide(obj)
    assert not decision.allowed
    prefix = template_path(kind)
    assert f"{prefix}.containers[0].resources.limits[nvidia.com/gpu]" in decision.message
    assert f"add to {prefix}:" in decision.message


def test_one_denial_lists_every_offending_container_and_the_replacement() -> None:
    decision = decide(
        pod(
            containers=[
                container("a", limits={GPU: "1"}),
                container("b", limits={GPU: "2", "amd.com/gpu": "1"}),
            ],
            initContainers=[container("warmup", limits={GPU: "1"})],
        )
    )
    assert not decision.allowed
    lines = [line for line in decision.message.splitlines() if line.startswith("- ")]
    assert len(lines) == 4
    assert "resourceClaims:" in decision.message
    assert "- name: gpu-b" in decision.message
    assert "deviceClassName: gpu.amd.com" in decision.message


def test_the_fix_names_the_claims_translation_would_make_for_the_same_pod() -> None:
    spec = {
        "containers": [
            container("a", limits={GPU: "2"}),
            container("b", limits={GPU: "1", "amd.com/gpu": "1"}),
        ]
    }
    denied = decide(pod(**spec))
    assert not denied.allowed
    translated = make_pipeline().review(
        Endpoint.MUTATE, decode_review(orjson.dumps(wrap(pod(ns="ml-research", **spec))))
    )
    (entries,) = [op["value"] for op in translated.patch if op["path"] == "/spec/resourceClaims"]
    names = [e["name"] for e in entries]
    assert names == ["gpu-a", "gpu-b", "gpu-b-2"]
    fix = denied.message.split("add to spec:", 1)[1]
    suggested = [line.split(": ", 1)[1] for line in fix.splitlines() if line.startswith("  - name")]
    assert suggested[: len(entries)] == names


def test_plain_pods_and_pods_with_claims_are_allowed_untouched() -> None:
    plain = pod(containers=[container("web", limits={"cpu": "1", "memory": "1Gi"})])
    assert decide(plain) == Decision(
        allowed=True,
        policies=(
            "dra-only",
            "near-misses",
            "pod-satisfiability",
            "preemption",
            "claim-quota",
            "device-classes",
        ),
    )
    claims = pod(
        containers=[{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "t"}],
    )
    assert decide(claims).allowed


def test_audit_namespaces_allow_with_a_warning_per_offence() -> None:
    decision = decide(
        pod(
            "ml-audit",
            containers=[container("a", limits={GPU: "1"}), container("b", limits={GPU: "1"})],
        )
    )
    assert decision.allowed
    assert decision.findings == 2
    assert len(decision.warnings) == 2
    assert "would be denied in a dra-only namespace" in decision.warnings[0]


@pytest.mark.parametrize("ns", ["default", "kube-system", "dra-webhook"])
def test_unlabelled_and_exempt_namespaces_are_allowed(ns: str) -> None:
    objects = [namespace(ns, "dra-only" if ns != "default" else None)]
    assert decide(pod(ns, containers=[container("a", limits={GPU: "1"})]), objects=objects).allowed


def test_the_own_namespace_is_exempt_even_when_labelled_dra_only() -> None:
    objects = [namespace("dra-webhook", "dra-only")]
    decision = decide(
        pod("dra-webhook", containers=[container("a", limits={GPU: "1"})]), objects=objects
    )
    assert decision == Decision(allowed=True)


def test_an_update_that_adds_a_gpu_is_denied_but_a_pre_existing_one_is_only_warned() -> None:
    old = pod(containers=[container("a", limits={GPU: "1"})])
    same = pod(containers=[container("a", limits={GPU: "1"})])
    decision = decide(same, operation="UPDATE", old=old)
    assert decision.allowed
    assert "predates the gpu-mode=dra-only label" in decision.warnings[0]

    grown = pod(
        containers=[container("a", limits={GPU: "1"})],
        ephemeralContainers=[container("debug", limits={GPU: "1"})],
    )
    decision = decide(grown, operation="UPDATE", old=old)
    assert not decision.allowed
    assert "spec.ephemeralContainers[0]" in decision.message
    assert "spec.containers[0]" not in decision.message.split("Remove")[0]


def test_an_unknown_namespace_fails_closed_by_default_or_open_as_configured() -> None:
    obj = pod("brand-new", containers=[container("a", limits={GPU: "1"})])
    closed = decide(obj)
    assert not closed.allowed
    assert closed.code == 503
    assert "not in dra-webhook's cluster view" in closed.message
    opened = decide(obj, policy=policy_from("failure: {unknownNamespace: open}"))
    assert opened.allowed
    assert "not in dra-webhook's cluster view" in opened.warnings[0]


def test_a_legacy_gpu_in_a_namespace_the_view_has_never_seen_is_not_let_through() -> None:
    decision = decide(pod("created-a-moment-ago", containers=[container("a", limits={GPU: "1"})]))
    assert not decision.allowed


DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"extendedResourceName": GPU},
}


SLICE = node_slice("node-a")
"""Devices for the mapping class (satisfiability has nothing to say of one GPU)."""
MAPPED = {
    "draOnly": "{mappedNames: allow}",
    "deprecated": "{allowDeviceClassExtendedResources: true}",
}
ALLOWED = (
    "spec.containers[0].resources.limits[nvidia.com/gpu]: container a asks for nvidia.com/gpu: "
    "1: allowed: the scheduler serves it from DeviceClass gpu.nvidia.com; nodes still running "
    "the device plugin would serve it there"
)


@pytest.mark.parametrize("key", list(MAPPED), ids=["mappedNames", "the deprecated key"])
def test_names_a_device_class_maps_are_allowed_with_a_warning_only_when_the_policy_says(
    key: str,
) -> None:
    obj = pod(containers=[container("a", limits={GPU: "1"})])
    objects = [namespace("gpu-e2e", "dra-only"), DEVICE_CLASS, SLICE]
    assert not decide(obj, objects=objects).allowed  # mappedNames: deny, the default
    enabled = policy_from(f"draOnly: {MAPPED[key]}")
    allowed = decide(obj, objects=objects, policy=enabled)
    assert allowed.allowed
    assert allowed.warnings == (ALLOWED,)
    assert not decide(obj, objects=[namespace("gpu-e2e", "dra-only")], policy=enabled).allowed


def test_with_mapped_names_allowed_the_names_no_class_maps_are_still_denied() -> None:
    obj = pod(containers=[container("a", limits={GPU: "1", "amd.com/gpu": "1"})])
    objects = [namespace("gpu-e2e", "dra-only"), DEVICE_CLASS, SLICE]
    decision = decide(obj, objects=objects, policy=policy_from("draOnly: {mappedNames: allow}"))
    assert not decision.allowed
    assert "limits[amd.com/gpu]: container a asks for amd.com/gpu: 1 -> use DeviceClass" in (
        decision.message
    )
    assert "limits[nvidia.com/gpu]" not in decision.message
    assert decision.warnings == (ALLOWED,)


def test_audit_reports_a_mapped_name_as_dra_only_would_treat_it() -> None:
    obj = pod(ns="ml-audit", containers=[container("a", limits={GPU: "1"})])
    objects = [namespace("ml-audit", "audit"), DEVICE_CLASS, SLICE]
    denied = decide(obj, objects=objects)
    assert denied.findings == 1
    assert "would be denied in a dra-only namespace" in denied.warnings[0]
    allowed = decide(obj, objects=objects, policy=policy_from("draOnly: {mappedNames: allow}"))
    assert allowed.findings == 0
    assert allowed.warnings == (ALLOWED.replace(": allowed:", ": would be allowed in dra-only:"),)


def test_an_update_of_a_workload_admitted_with_a_mapped_name_is_not_warned_again() -> None:
    def deployment(replicas: int) -> dict[str, Any]:
        spec = {"containers": [container("a", limits={GPU: "1"})]}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "gpu-e2e"},
            "spec": {"replicas": replicas, "template": {"spec": spec}},
        }

    objects = [namespace("gpu-e2e", "dra-only"), DEVICE_CLASS, SLICE]
    policy = policy_from("draOnly: {mappedNames: allow}")
    created = decide(deployment(1), objects=objects, policy=policy)
    assert created.allowed and len(created.warnings) == 1
    updated = decide(
        deployment(2), objects=objects, policy=policy, operation="UPDATE", old=deployment(1)
    )
    assert updated.allowed and updated.warnings == ()


def test_a_legacy_name_without_a_mapping_says_which_config_to_add() -> None:
    decision = decide(pod(containers=[container("a", limits={"habana.ai/gaudi": "1"})]))
    assert "add a `mappings` entry" in decision.message


def test_the_legacy_list_and_mode_label_are_configurable() -> None:
    policy = policy_from("""
namespaceModes: {label: example.com/gpus, draOnly: strict}
legacyResources: {names: [example.com/fpga-*]}
""")
    objects = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "gpu-e2e", "labels": {"example.com/gpus": "strict"}},
        }
    ]
    fpga = pod(containers=[container("a", limits={"example.com/fpga-x": "1"})])
    gpu = pod(containers=[container("a", limits={GPU: "1"})])
    assert not decide(fpga, objects=objects, policy=policy).allowed
    assert decide(gpu, objects=objects, policy=policy).allowed


def test_the_mutating_endpoint_never_denies_for_dra_only() -> None:
    decision = decide(pod(containers=[container("a", limits={GPU: "1"})]), Endpoint.MUTATE)
    assert decision.allowed


def test_a_repeated_denial_reuses_its_text_and_a_different_shape_gets_its_own() -> None:
    pipeline = make_pipeline(None, None)

    def review(obj: dict[str, Any]) -> Decision:
        return pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(wrap(obj))))

    two = pod(containers=[container("cuda", limits={GPU: "2"})])
    first, again = review(two), review(two)
    assert first.message == again.message
    assert "nvidia.com/gpu: 2 -> use DeviceClass gpu.nvidia.com (count 2)" in again.message
    four = review(pod(containers=[container("cuda", limits={GPU: "4"})]))
    assert "(count 4)" in four.message and "(count 2)" not in four.message
    renamed = review(pod(containers=[container("train", limits={GPU: "2"})]))
    assert "container train asks" in renamed.message and "cuda" not in renamed.message
    sidecar = review(
        pod(initContainers=[container("cuda", limits={GPU: "2"}, restartPolicy="Always")])
    )
    assert "sidecar container cuda" in sidecar.message


@pytest.mark.parametrize(
    "bad",
    [
        {"containers": [container("a", limits={"cpu": True, GPU: "1"})]},
        {"containers": [container("a", requests={"memory": {"x": 1}})]},
        {"containers": [{"name": 7, "image": "i"}]},
        {"containers": [container("a", limits={GPU: "1"})], "initContainers": "x"},
        {"containers": [{"name": "a", "resources": {"limits": [], "requests": {GPU: "1"}}}]},
        {"containers": [{"name": "a", "resources": {"limits": {}, "requests": ""}}]},
    ],
)
def test_a_malformed_pod_is_invalid_whether_or_not_a_legacy_name_is_in_it(bad: Any) -> None:
    for _ in range(2):  # the second time a memoized shape would answer, if one were taken
        decision = decide(pod(**bad))
        assert not decision.allowed
        assert decision.code == 422


WARNED = "draOnly: {auditWarnedByAdmissionPolicy: true}"


def test_audit_does_not_warn_twice_where_the_chart_s_admission_policy_warns() -> None:
    """The chart sets auditWarnedByAdmissionPolicy with its ValidatingAdmissionPolicy on: that
    policy warns on CREATE of a Deployment in an audit namespace, and the webhook, which still
    sees the Deployment for quotas, counts the finding without a second warning."""
    spec = {"containers": [container("app", limits={GPU: "1"})]}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ml-audit"},
        "spec": WORKLOADS[("apps/v1", "Deployment")](spec),
    }
    plain = decide(deployment)
    assert plain.allowed and plain.warnings and plain.findings == 1
    quiet = decide(deployment, policy=policy_from(WARNED))
    assert quiet.allowed and not quiet.warnings and quiet.findings == 1
    # UPDATEs are not matched by the admission policy: the webhook still says it
    updated = decide(deployment, policy=policy_from(WARNED), operation="UPDATE", old=deployment)
    assert any("predates" in w or "would be denied" in w for w in updated.warnings)
