"""translation.maxTemplatesPerNamespace: a user who may create pods cannot make the webhook create
templates without bound (one per distinct GPU count), while shapes already there stay free."""

from __future__ import annotations

import re

import pytest

from app.config.policy import Policy
from app.errors import PolicyError
from app.k8s.templates import TEMPLATE_LABEL, template_mismatch
from tests.helpers import DEMO_NAMESPACES, clone, policy_from, wrap
from tests.policies.translate_objects import NS, decide, gpus, pod

Obj = dict[str, object]


def managed(name: str, ns: str = NS) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "dra-webhook"},
        },
        "spec": {"spec": {"devices": {"requests": []}}},
    }


def users_own(name: str) -> dict[str, object]:
    template = managed(name)
    template["metadata"] = {"name": name, "namespace": NS}
    return template


CAP_2: Policy = policy_from("translation: {maxTemplatesPerNamespace: 2}")


def test_the_default_cap_is_100_templates_per_namespace() -> None:
    assert policy_from("{}").translation.max_templates_per_namespace == 100


def test_a_pod_needing_a_new_template_in_a_full_namespace_is_denied_naming_the_key() -> None:
    full = [*DEMO_NAMESPACES, managed("dra-a"), managed("dra-b")]
    decision = decide(wrap(pod(gpus("cuda", 3))), objects=full, policy=CAP_2)
    assert not decision.allowed
    assert decision.templates == ()
    assert "namespace ml-research already holds 2 made by dra-webhook" in decision.message
    assert "translation.maxTemplatesPerNamespace" in decision.message


def test_a_shape_whose_template_exists_is_still_translated_in_a_full_namespace() -> None:
    first = decide(wrap(pod(gpus("cuda", 3))), policy=CAP_2)
    assert first.allowed
    (template,) = first.templates
    stored = clone(template)
    full = [*DEMO_NAMESPACES, managed("dra-a"), stored]
    again = decide(wrap(pod(gpus("cuda", 3))), objects=full, policy=CAP_2)
    assert again.allowed, again.message


def test_templates_of_users_and_of_other_namespaces_do_not_count() -> None:
    others = [
        *DEMO_NAMESPACES,
        managed("dra-a"),
        users_own("mine-1"),
        users_own("mine-2"),
        managed("dra-x", ns="default"),
        managed("dra-y", ns="default"),
    ]
    assert decide(wrap(pod(gpus("cuda", 3))), objects=others, policy=CAP_2).allowed


def test_one_pod_with_several_new_shapes_counts_each_against_the_cap() -> None:
    one_left = [*DEMO_NAMESPACES, managed("dra-a")]
    decision = decide(wrap(pod(gpus("a", 1), gpus("b", 2))), objects=one_left, policy=CAP_2)
    assert not decision.allowed
    assert "translation.maxTemplatesPerNamespace" in decision.message


@pytest.mark.parametrize("text", ["{maxTemplatesPerNamespace: 0}", "{maxTemplatesPerNamespace: x}"])
def test_a_bad_cap_in_the_policy_names_the_key(text: str) -> None:
    with pytest.raises(PolicyError, match=re.escape("translation.maxTemplatesPerNamespace")):
        policy_from(f"translation: {text}")


def test_translation_templates_label_the_claims_made_from_them_with_their_name() -> None:
    decision = decide(wrap(pod(gpus("cuda", 2))))
    (template,) = decision.templates
    name = template["metadata"]["name"]
    assert template["spec"]["metadata"] == {"labels": {TEMPLATE_LABEL: name}}


def test_a_template_stored_before_the_claim_label_existed_is_still_ours() -> None:
    (template,) = decide(wrap(pod(gpus("cuda", 2)))).templates
    older = clone(template)
    older["spec"] = {"metadata": {}, "spec": older["spec"]["spec"]}
    assert template_mismatch(older, template) is None
    tampered = clone(template)
    tampered["spec"]["metadata"] = {"labels": {TEMPLATE_LABEL: "x", "extra": "1"}}
    assert template_mismatch(tampered, template) is not None
