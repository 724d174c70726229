"""The pipeline: routing by (endpoint, group, kind, operation), exemptions, what registrations
declare (parts built and indexes subscribed at load); the merge of the checks' results is
tests/test_verdict.py."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.cluster.usage import ClaimUsage
from app.cluster.view import Kind
from app.pipeline import REGISTRATIONS, Endpoint, Pipeline, Registration
from app.policies import rules
from app.policies.base import ALLOW, Context, Request, Result
from app.policies.quota.rules import quota_rules
from app.transport.review import decode_review
from tests.helpers import (
    GROUP_FIXTURE_NAMES,
    load_fixture,
    make_view,
    namespace,
    policy_from,
    review,
    wrap,
)

FIXTURES = (
    "deployment-create-legacy-gpu",
    "deviceclass-create-extended-resource",
    "deviceclass-update-label",
    "devicetaintrule-create-v1beta2",
    "devicetaintrule-update-label",
    "namespace-create-admin-access",
    "namespace-update-admin-access",
    "pod-create-legacy-gpu",
    "pod-create-legacy-gpu-dryrun",
    "pod-create-with-resourceclaims",
    "pod-update-legacy-gpu",
    "resourceclaim-create",
    "resourceclaim-create-via-v1beta2",
    "resourceclaim-update",
    "resourceclaimtemplate-create",
)

BUSY_POLICY = """
mappings: [{resource: nvidia.com/gpu, deviceClassName: gpu.nvidia.com}]
translation: {translateWorkloads: true}
quotas:
  - name: everyone
    namespaceSelector: {matchExpressions: [{key: gpu-mode, operator: Exists}]}
    maxDevicesPerRequest: {"*": 1}
    maxDevicesPerNamespace: {"*": 1}
defaults:
  deviceClasses:
    gpu.nvidia.com: {selectors: ['device.driver == "gpu.nvidia.com"'], count: 1}
cel:
  rules:
    - name: team-label
      match: {kinds: [Pod, Deployment, ResourceClaim]}
      expression: 'has(object.metadata.labels)'
      message: add labels
adminAccess:
  enabled: true
  groups: [platform-admins]
  namespaceSelector: {matchLabels: {tier: ops}}
deviceClasses:
  - name: everyone
    namespaceSelector: {matchExpressions: [{key: gpu-mode, operator: Exists}]}
    allowed: [mig.nvidia.com]
"""
"""A policy under which every check has something to do with the captured reviews."""


def request_of(body: dict[str, Any]) -> Request:
    return decode_review(orjson.dumps(body))


def decide(pipeline: Pipeline, endpoint: Endpoint, body: dict[str, Any]) -> Any:
    return pipeline.review(endpoint, request_of(body))


def all_reviews() -> list[tuple[Endpoint, dict[str, Any]]]:
    return [
        (endpoint, review(name, namespace=ns))
        for name in (*FIXTURES, *GROUP_FIXTURE_NAMES)
        for ns in ("gpu-e2e", "ml-research", "ml-audit")
        for endpoint in Endpoint
    ]


# -- routing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "fixture", "ns", "expected"),
    [
        (
            Endpoint.VALIDATE,
            "pod-create-legacy-gpu",
            "gpu-e2e",
            (
                "dra-only",
                "near-misses",
                "pod-satisfiability",
                "preemption",
                "claim-quota",
                "device-classes",
            ),
        ),
        (
            # one call per translated pod: its validating checks too, but the joint
            # satisfiability translation did with the claims it made
            Endpoint.MUTATE,
            "pod-create-legacy-gpu",
            "ml-research",
            (
                "translate",
                "translate-quota",
                "device-classes-translate",
                "dra-only",
                "near-misses",
                "preemption",
                "claim-quota",
                "device-classes",
            ),
        ),
        (
            Endpoint.MUTATE,
            "pod-create-with-resourceclaims",
            "ml-research",
            (
                "translate",
                "translate-quota",
                "device-classes-translate",
                "dra-only",
                "near-misses",
                "pod-satisfiability",
                "preemption",
                "claim-quota",
                "device-classes",
            ),
        ),
        (
            Endpoint.MUTATE,
            "pod-create-legacy-gpu",
            "gpu-e2e",
            ("translate", "translate-quota", "device-classes-translate"),
        ),
        (
            Endpoint.VALIDATE,
            "deployment-create-legacy-gpu",
            "ml-research",
            (
                "dra-only",
                "near-misses",
                "translate-validate",
                "pod-satisfiability",
                "preemption",
                "claim-quota",
                "device-classes",
            ),
        ),
        (
            Endpoint.MUTATE,
            "deployment-create-legacy-gpu",
            "ml-research",
            (
                "translate-workloads",
                "translate-quota",
                "preemption-translate",
                "device-classes-translate",
            ),
        ),
        (
            Endpoint.VALIDATE,
            "resourceclaim-create",
            "ml-research",
            ("cel-selectors", "claim-quota", "admin-access-claims", "device-classes"),
        ),
        (Endpoint.MUTATE, "resourceclaim-create", "ml-research", ("claim-defaults",)),
        (Endpoint.MUTATE, "resourceclaim-update", "ml-research", ()),
    ],
)
def test_a_review_runs_exactly_the_checks_registered_for_its_endpoint_kind_and_operation(
    endpoint: Endpoint, fixture: str, ns: str, expected: tuple[str, ...]
) -> None:
    pipeline = Pipeline(policy_from("{}"), make_view(), own_namespace="dra-webhook")
    assert decide(pipeline, endpoint, review(fixture, namespace=ns)).policies == expected


@pytest.mark.parametrize("ns", ["kube-system", "dra-webhook", "listed-exempt"])
def test_exempt_namespaces_are_allowed_without_running_any_check(ns: str) -> None:
    view = make_view([namespace(ns, "dra-only")])
    pipeline = Pipeline(
        policy_from("exemptNamespaces: [listed-exempt]"), view, own_namespace="dra-webhook"
    )
    decision = decide(pipeline, Endpoint.VALIDATE, review("pod-create-legacy-gpu", namespace=ns))
    assert decision.allowed
    assert decision.policies == ()


def test_a_kind_nothing_is_registered_for_is_allowed_unchanged() -> None:
    pipeline = Pipeline(policy_from("{}"), make_view(), own_namespace="dra-webhook")
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    config_map["metadata"]["namespace"] = "gpu-e2e"
    decision = decide(pipeline, Endpoint.VALIDATE, wrap(config_map))
    assert decision.allowed
    assert decision.policies == ()
    assert decision.patch == ()


def test_admin_rules_are_routed_only_to_the_kinds_and_operations_some_rule_matches() -> None:
    policy = policy_from(
        "cel:\n  rules:\n    - name: r\n      match: {kinds: [ResourceClaim], "
        "operations: [UPDATE]}\n      expression: 'false'\n      message: nope\n"
    )
    pipeline = Pipeline(policy, make_view(), own_namespace="dra-webhook")
    update = decide(
        pipeline, Endpoint.VALIDATE, review("resourceclaim-update", namespace="default")
    )
    create = decide(
        pipeline, Endpoint.VALIDATE, review("resourceclaim-create", namespace="default")
    )
    pod = decide(pipeline, Endpoint.VALIDATE, review("pod-create-legacy-gpu", namespace="default"))
    assert "cel-rules" in update.policies
    assert "cel-rules" not in create.policies
    assert "cel-rules" not in pod.policies


# -- what registrations declare ---------------------------------------------------------------


def test_the_parts_and_indexes_the_registrations_declare_are_ready_at_load() -> None:
    view = make_view()
    pipeline = Pipeline(policy_from(BUSY_POLICY), view, own_namespace="dra-webhook")
    for reg in pipeline_registrations(pipeline):
        for builder in reg.builds:
            assert builder in pipeline.parts, (reg.name, builder)
        for index in reg.indexes:
            view.index(index)  # raises when not subscribed


@pytest.mark.parametrize("registration", REGISTRATIONS, ids=lambda r: r.name)
def test_each_check_reads_only_what_its_own_registration_declares(
    registration: Registration,
) -> None:
    """Built alone, a registration's check runs over every captured review without failing:
    nothing it reads (a part, a derived index) comes from another registration's declaration,
    and nothing is subscribed to the view on the request path."""
    view = make_view()
    pipeline = Pipeline(
        policy_from(BUSY_POLICY), view, own_namespace="dra-webhook", registrations=(registration,)
    )
    subscribed = dict(view._derived)
    ran = 0
    for endpoint, body in all_reviews():
        decision = decide(pipeline, endpoint, body)
        assert decision.failed_checks == (), (registration.name, endpoint, body["request"]["uid"])
        ran += registration.name in decision.policies
    assert ran > 0
    assert view._derived == subscribed


def test_a_check_reading_an_undeclared_part_fails_alone_as_an_internal_error() -> None:
    def sneaky(request: Request, ctx: Context) -> Result:
        ctx.parts[quota_rules]
        return ALLOW

    reg = Registration(
        "sneaky", Endpoint.VALIDATE, frozenset({("", "Pod")}), frozenset({"CREATE"}), sneaky
    )
    pipeline = Pipeline(
        policy_from("{}"), make_view(), own_namespace="dra-webhook", registrations=(reg,)
    )
    decision = decide(pipeline, Endpoint.VALIDATE, review("pod-create-legacy-gpu"))
    assert decision.failed_checks == ("sneaky",)


def test_a_check_cannot_subscribe_an_index_on_the_request_path() -> None:
    def sneaky(request: Request, ctx: Context) -> Result:
        ctx.view.index(ClaimUsage)
        return ALLOW

    reg = Registration(
        "sneaky", Endpoint.VALIDATE, frozenset({("", "Pod")}), frozenset({"CREATE"}), sneaky
    )
    view = make_view()
    pipeline = Pipeline(policy_from("{}"), view, own_namespace="dra-webhook", registrations=(reg,))
    decision = decide(pipeline, Endpoint.VALIDATE, review("pod-create-legacy-gpu"))
    assert decision.failed_checks == ("sneaky",)
    with pytest.raises(LookupError, match="ClaimUsage is not subscribed"):
        view.index(ClaimUsage)


def test_a_rule_that_does_not_compile_stops_the_pipeline_at_load() -> None:
    bad = policy_from(
        "cel:\n  rules:\n    - name: broken\n      match: {kinds: [Pod]}\n"
        "      expression: 'object.'\n      message: m\n"
    )
    with pytest.raises(Exception, match=r"cel\.rules\[0\] \(broken\)"):
        Pipeline(bad, make_view(), own_namespace="dra-webhook")


def test_admin_rules_are_built_only_when_a_rule_is_routed() -> None:
    pipeline = Pipeline(policy_from("{}"), make_view(), own_namespace="dra-webhook")
    assert rules.admin_rules not in pipeline.parts


def pipeline_registrations(pipeline: Pipeline) -> set[Registration]:
    return {reg for regs in pipeline._routes.values() for reg in regs}


def test_a_stale_kind_a_check_reads_answers_per_the_stale_view_policy() -> None:
    view = make_view()
    pipeline = Pipeline(
        policy_from("failure: {staleView: {default: closed}}"), view, own_namespace="dra-webhook"
    )
    view.mark_stale(Kind.DEVICE_CLASS)
    decision = decide(pipeline, Endpoint.VALIDATE, review("pod-create-legacy-gpu"))
    assert not decision.allowed
    assert decision.code == 503
    assert "dra-only: dra-webhook's cluster view of DeviceClass is out of date" in decision.message


def test_load_fixture_reviews_decode() -> None:
    assert request_of(load_fixture("pod-create-legacy-gpu")).kind == "Pod"
