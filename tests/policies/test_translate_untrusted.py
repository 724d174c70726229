"""Translation on hostile input: resource names pasted into CEL, pods built to make it costly,
and pod-level entries that only look like translation's own."""

from __future__ import annotations

import re
from typing import Any

import pytest

from app.cluster.view import ClusterView
from app.config.policy import Mapping
from app.pipeline import Endpoint
from app.policies.legacy import (
    DeviceMapping,
    MappingResolver,
    expand_rule,
    is_dns_subdomain,
    is_resource_name,
)
from tests.conftest import DEMO_NAMESPACES, policy_from, wrap
from tests.policies.test_translate import (
    claim_refs,
    container,
    decide,
    deployment,
    gpus,
    pod,
    rct,
    reapplied_manifest,
    translate,
)

Obj = dict[str, Any]
INJECTED = 'nvidia.com/mig-7g.80gb" || "a" == "a'
"""Matches the shipped `nvidia.com/mig-(.+)` rule; pasted into its selector it would read
`profile == "7g.80gb" || "a" == "a"`: every device."""


# -- resource names and CEL ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/mig-1g.10gb", True),
        ("example.com/Big_GPU.v2", True),
        ("gpu", True),
        ("a" * 63, True),
        ("example.com/" + "a" * 64, False),
        ("a" * 254 + "/gpu", False),
        (INJECTED, False),
        ('nvidia.com/mig-1g"', False),
        ("nvidia.com/mig-1g\\", False),
        ("nvidia.com/-gpu", False),
        ("nvidia.com/gpu-", False),
        ("Nvidia.com/gpu", False),
        ("nvidia.com/", False),
        ("/gpu", False),
        ("a/b/c", False),
        ("", False),
    ],
)
def test_only_qualified_names_are_resource_names(name: str, valid: bool) -> None:
    assert is_resource_name(name) is valid


@pytest.mark.parametrize("where", ["limits", "requests"])
def test_a_resource_name_that_would_inject_cel_is_denied_with_its_path_and_creates_nothing(
    where: str,
) -> None:
    cuda = {"name": "cuda", "image": "cuda:12", "resources": {where: {INJECTED: "1"}}}
    decision = decide(wrap(pod(cuda)))
    assert not decision.allowed
    assert decision.templates == ()
    assert decision.patch == ()
    assert f"spec.containers[0].resources.{where}[{INJECTED}]" in decision.message
    assert "is not a valid resource name" in decision.message


def test_a_workload_with_such_a_name_is_denied_when_applied() -> None:
    decision = decide(
        wrap(deployment(container("cuda", limits={INJECTED: "1"}))), Endpoint.VALIDATE
    )
    assert not decision.allowed
    assert "spec.template.spec.containers[0].resources.limits" in decision.message
    assert "is not a valid resource name" in decision.message


def test_such_a_name_is_denied_in_a_dra_only_namespace_too() -> None:
    obj = pod(container("cuda", limits={INJECTED: "1"}), ns="gpu-e2e")
    decision = decide(wrap(obj), Endpoint.VALIDATE)
    assert not decision.allowed
    assert decision.denied_by == ("dra-only",)


def test_an_invalid_name_is_never_mapped_whatever_the_rules_say() -> None:
    resolver = MappingResolver(
        (Mapping(resource=".*", pattern=True, deviceClassName="gpu.example.com"),)
    )
    view = ClusterView()
    assert resolver.resolve("example.com/gpu", view) == DeviceMapping("gpu.example.com")
    assert resolver.resolve(INJECTED, view) is None
    implicit = "deviceclass.resource.kubernetes.io/Not_A_Class"
    assert MappingResolver(()).resolve(implicit, view) is None


PROFILE_RULE = Mapping(
    resource="nvidia.com/mig-(.+)",
    pattern=True,
    deviceClassName="mig.nvidia.com",
    selectors=('device.attributes["gpu.nvidia.com"].profile == "$1"',),
)


@pytest.mark.parametrize(
    "capture",
    ['7g.80gb" || "a" == "a', '7g.80gb\\" || true || \\"', "1g/10gb", "1g 10gb", "x)||true||(x"],
)
def test_a_group_that_would_change_the_selector_gives_no_mapping(capture: str) -> None:
    match = re.fullmatch(PROFILE_RULE.resource, f"nvidia.com/mig-{capture}")
    assert match is not None
    refused = expand_rule(PROFILE_RULE, match)
    assert isinstance(refused, str)
    assert "letters, digits, '.', '_' and '-'" in refused


def test_a_group_of_letters_digits_dots_and_dashes_is_pasted_into_the_selector() -> None:
    match = re.fullmatch(PROFILE_RULE.resource, "nvidia.com/mig-1g.10gb_x-y")
    assert match is not None
    assert expand_rule(PROFILE_RULE, match) == DeviceMapping(
        "mig.nvidia.com", ('device.attributes["gpu.nvidia.com"].profile == "1g.10gb_x-y"',)
    )


@pytest.mark.parametrize(
    ("resource", "mapped"),
    [
        ("example.com/h100", "h100.example.com"),
        ("example.com/H100", None),
        ("example.com/big_gpu", None),
        ("example.com/a..b", None),
    ],
)
def test_a_group_pasted_into_the_device_class_name_must_be_a_dns_subdomain(
    resource: str, mapped: str | None
) -> None:
    rule = Mapping(resource="example.com/(.+)", pattern=True, deviceClassName="$1.example.com")
    resolver = MappingResolver((rule,))
    found = resolver.resolve(resource, ClusterView())
    assert (found.device_class_name if found else None) == mapped
    if mapped is None:
        assert "a valid DeviceClass name" in resolver.missing_hint(resource)


def test_a_refused_group_is_explained_in_the_denial() -> None:
    policy = policy_from(
        "legacyResources: {names: ['example.com/*']}\n"
        "mappings:\n"
        "- resource: '(.+)'\n"
        "  pattern: true\n"
        "  deviceClassName: gpu.example.com\n"
        '  selectors: [\'device.attributes["gpu.example.com"].name == "$1"\']\n'
    )
    decision = decide(wrap(pod(container("cuda", limits={"example.com/gpu": "1"}))), policy=policy)
    assert not decision.allowed
    assert "a group it pastes into a selector holds characters other than" in decision.message


@pytest.mark.parametrize(
    ("name", "valid"),
    [("gpu.nvidia.com", True), ("a", True), ("GPU.x", False), ("a_b", False), ("a..b", False)],
)
def test_dns_subdomains(name: str, valid: bool) -> None:
    assert is_dns_subdomain(name) is valid


# -- workload UPDATE: whose pod-level entries are whose ---------------------------------------

LOOKALIKE = "dra-fpga-example-com-1-0123456789"
"""A template name of the user's that happens to have the shape of translation's names."""


def _fpga_template(labels: Obj | None = None) -> Obj:
    template = rct(LOOKALIKE, "fpga.example.com")
    if labels is not None:
        template["metadata"]["labels"] = labels
    return template


def _deployment_with_an_fpga_claim() -> Obj:
    side = container("side")
    side["resources"] = {"claims": [{"name": "fpga"}]}
    obj = deployment(gpus("c", 1), side)
    obj["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": "fpga", "resourceClaimTemplateName": LOOKALIKE}
    ]
    return obj


TRANSLATE_WORKLOADS = "translation: {translateWorkloads: true}"


def test_a_workload_update_keeps_the_users_claim_whose_template_is_not_labelled_as_ours() -> None:
    obj = _deployment_with_an_fpga_claim()
    decision, result = translate(
        obj,
        objects=[*DEMO_NAMESPACES, _fpga_template()],
        policy=policy_from(TRANSLATE_WORKLOADS),
        operation="UPDATE",
        old=obj,
    )
    assert not [op for op in decision.patch if op["op"] == "remove" and "claims" in op["path"]]
    spec = result["spec"]["template"]["spec"]
    assert spec["resourceClaims"][0] == {"name": "fpga", "resourceClaimTemplateName": LOOKALIKE}
    assert claim_refs(spec["containers"][1]) == ["fpga"]
    assert claim_refs(spec["containers"][0]) == ["gpu-c"]


def test_a_workload_update_whose_lookalike_entry_the_view_cannot_place_is_denied() -> None:
    obj = _deployment_with_an_fpga_claim()
    decision = decide(
        wrap(obj, operation="UPDATE", old=obj), policy=policy_from(TRANSLATE_WORKLOADS)
    )
    assert not decision.allowed
    assert decision.patch == ()
    assert "spec.template.spec.resourceClaims[0]" in decision.message
    assert f"fpga: ResourceClaimTemplate {LOOKALIKE} is named like the ones" in decision.message


def test_an_entry_whose_template_carries_our_label_is_replaced_on_update() -> None:
    obj = _deployment_with_an_fpga_claim()
    ours = _fpga_template({"app.kubernetes.io/managed-by": "dra-webhook"})
    _, result = translate(
        obj,
        objects=[*DEMO_NAMESPACES, ours],
        policy=policy_from(TRANSLATE_WORKLOADS),
        operation="UPDATE",
        old=obj,
    )
    spec = result["spec"]["template"]["spec"]
    assert [e["name"] for e in spec["resourceClaims"]] == ["gpu-c"]
    assert claim_refs(spec["containers"][1]) == []


def test_reapplying_a_translated_manifest_whose_templates_the_view_lacks_is_denied() -> None:
    _, _, decision = reapplied_manifest(templates_in_view=False)
    assert not decision.allowed
    assert decision.patch == ()
    assert "spec.template.spec.resourceClaims[0]" in decision.message
    assert "is not in its cluster view" in decision.message
