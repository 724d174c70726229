"""Translation on hostile input: resource names pasted into CEL, pods built to make it costly,
and pod-level entries that only look like translation's own."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from app.cluster.view import ClusterView
from app.config.policy import MappingRule
from app.errors import PolicyError
from app.pipeline import Endpoint
from app.translation.legacy import (
    DeviceMapping,
    MappingResolver,
    expand_rule,
    is_dns_subdomain,
    is_resource_name,
)
from tests.helpers import DEMO_NAMESPACES, clone, policy_from, wrap
from tests.policies.translate_objects import (
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
from tests.policies.translate_support import apply

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
        (MappingRule(resource=".*", pattern=True, deviceClassName="gpu.example.com"),)
    )
    view = ClusterView()
    assert resolver.resolve("example.com/gpu", view) == DeviceMapping("gpu.example.com")
    assert resolver.resolve(INJECTED, view) is None
    implicit = "deviceclass.resource.kubernetes.io/Not_A_Class"
    assert MappingResolver(()).resolve(implicit, view) is None


PROFILE_RULE = MappingRule(
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
    rule = MappingRule(resource="example.com/(.+)", pattern=True, deviceClassName="$1.example.com")
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


# -- cost: bounded per pod, whatever the pod holds -------------------------------------------


def _wide_pod(app: int, init: int, init_count: int) -> Obj:
    """`app` containers asking one GPU each, `init` init containers asking `init_count` each."""
    return pod(
        *(gpus(f"a{i}", 1) for i in range(app)),
        init=tuple(gpus(f"i{i}", init_count) for i in range(init)),
    )


def test_each_init_container_of_a_wide_pod_references_one_claim_and_the_answer_grows_linearly() -> (
    None
):
    # 31 app containers and their top-up make the default cap of 32 claims; 400 init containers
    # bigger than any app claim each used to reference every app claim (400 x 31 references).
    obj = _wide_pod(app=31, init=400, init_count=32)
    decision = decide(wrap(obj))
    assert decision.allowed, decision.message
    after = apply(obj, decision.patch)
    spec = after["spec"]
    assert all(claim_refs(c) == ["gpu-init"] for c in spec["initContainers"])
    assert len(spec["resourceClaims"]) == 32
    assert len(decision.templates) == 2  # one GPU, and the 32-GPU top-up
    # per container: limits, requests, claims; the pod's claims; the translated annotation
    assert len(decision.patch) <= 3 * 431 + 2
    request_size = len(orjson.dumps(obj))
    assert len(orjson.dumps(list(decision.patch))) < 3 * request_size
    assert len(orjson.dumps(after)) < 2 * request_size


def test_a_pod_needing_more_claims_than_the_cap_is_denied_naming_the_key_and_stops_early() -> None:
    # the reviewed shape: N app containers asking 1, N init containers asking more (32, the
    # most one claim holds: more would be a problem per container, not a claim over the cap)
    obj = _wide_pod(app=800, init=800, init_count=32)
    decision = decide(wrap(obj))
    assert not decision.allowed
    assert decision.patch == () and decision.templates == ()
    assert "needs more than 32 resource claims" in decision.message
    assert "translation.maxClaimsPerPod" in decision.message
    assert len(decision.message) < 2000
    assert len(decision.warnings) == 0


def test_a_pod_needing_more_templates_than_the_cap_is_denied_naming_the_key() -> None:
    obj = pod(*(gpus(f"a{i}", i + 1) for i in range(9)))  # nine counts, nine templates
    decision = decide(wrap(obj))
    assert not decision.allowed
    assert "needs more than 8 ResourceClaimTemplates" in decision.message
    assert "translation.maxTemplatesPerPod" in decision.message
    assert decision.templates == ()


def test_the_caps_come_from_the_policy() -> None:
    policy = policy_from("translation: {maxClaimsPerPod: 2, maxTemplatesPerPod: 1}")
    assert decide(wrap(pod(gpus("a", 1), gpus("b", 1))), policy=policy).allowed
    three = decide(wrap(pod(gpus("a", 1), gpus("b", 1), gpus("c", 1))), policy=policy)
    assert "needs more than 2 resource claims" in three.message
    two_shapes = decide(wrap(pod(gpus("a", 1), gpus("b", 2))), policy=policy)
    assert "needs more than 1 ResourceClaimTemplates" in two_shapes.message
    # the top-up of the init containers counts too
    topped = decide(wrap(pod(gpus("a", 1), gpus("b", 1), init=(gpus("i", 1),))), policy=policy)
    assert topped.allowed
    over = decide(wrap(pod(gpus("a", 1), gpus("b", 1), init=(gpus("i", 2),))), policy=policy)
    assert "needs more than 2 resource claims" in over.message


def test_a_workload_over_a_cap_is_denied_when_applied_and_an_old_one_only_warned() -> None:
    wide = deployment(*(gpus(f"a{i}", 1) for i in range(33)))
    decision = decide(wrap(wide), Endpoint.VALIDATE)
    assert not decision.allowed
    assert decision.denied_by == ("translate-validate",)
    assert "spec.template.spec: translating this pod needs more than 32" in decision.message
    relabelled = clone(wide)
    relabelled["metadata"]["labels"] = {"team": "research"}
    update = decide(wrap(relabelled, operation="UPDATE", old=wide), Endpoint.VALIDATE)
    assert update.allowed
    assert any("predates this change" in w for w in update.warnings)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("translation: {maxClaimsPerPod: 0}", "translation.maxClaimsPerPod"),
        ("translation: {maxTemplatesPerPod: many}", "translation.maxTemplatesPerPod"),
    ],
)
def test_cap_errors_in_the_policy_name_the_key(text: str, key: str) -> None:
    with pytest.raises(PolicyError, match=re.escape(key)):
        policy_from(text)


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
