"""Translation through the real ASGI app: templates exist before the answer, once per shape.

The cluster source stands in for the API server: a StaticSource records creates in the view, as
the live source does after its create; `SlowSource` adds the latency of a real API call and counts
the calls, so concurrent admissions of a new shape can be seen to share one create.
"""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from app.cluster.view import Kind
from app.config import Settings
from app.metrics import Metrics
from app.transport.app import create_app
from tests.helpers import (
    DEMO_NAMESPACES,
    AppHarness,
    build_app,
    namespace,
    policy_from,
    review,
    wrap,
    write_cluster_file,
)
from tests.policies.translate_support import apply, assert_pod_rules, assert_valid
from tests.transport.helpers import SlowSource, admit_concurrently

Obj = dict[str, Any]
NS = "ml-research"
LEGACY = "pod-create-legacy-gpu"
TRANSLATED_E2E = [*(n for n in DEMO_NAMESPACES if n["metadata"]["name"] != "gpu-e2e")]
TRANSLATED_E2E.append(namespace("gpu-e2e", "translate"))


def patch_of(response: Obj) -> list[Obj]:
    assert response["patchType"] == "JSONPatch"
    ops: list[Obj] = orjson.loads(base64.b64decode(response["patch"]))
    return ops


def gpu_pod(name: str, count: int = 1) -> Obj:
    limits = {"nvidia.com/gpu": str(count)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "containers": [
                {
                    "name": "cuda",
                    "image": "cuda:12",
                    "resources": {"limits": limits, "requests": dict(limits)},
                }
            ]
        },
    }


def test_the_captured_pod_in_a_translate_namespace_is_patched_and_its_template_created(
    tmp_path: Path,
) -> None:
    cluster = write_cluster_file(tmp_path / "cluster.yaml", TRANSLATED_E2E)
    metrics = Metrics()
    app = create_app(Settings(cluster_file=cluster), metrics=metrics)
    with TestClient(app) as client:
        body = review(LEGACY)
        http = client.post(
            "/mutate", content=orjson.dumps(body), headers={"content-type": "application/json"}
        )
        assert http.status_code == 200
        response = http.json()["response"]
        assert response["uid"] == body["request"]["uid"]
        assert response["allowed"] is True
        result = apply(body["request"]["object"], patch_of(response))
        assert_valid(result)
        (entry,) = result["spec"]["resourceClaims"]
        view = app.state.webhook.source.view
        template = view.get(
            Kind.RESOURCE_CLAIM_TEMPLATE, entry["resourceClaimTemplateName"], "gpu-e2e"
        )
        assert template is not None
        assert template["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "dra-webhook"}
        assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
        assert response["warnings"][0].startswith(
            "container cuda: nvidia.com/gpu: 2 -> claim gpu-cuda"
        )
        assert "dra_webhook_templates_created_total 1.0" in metrics.render().decode()


def test_a_dry_run_is_answered_with_the_patch_but_creates_no_template(
    make_app: Callable[..., AppHarness],
) -> None:
    harness = make_app(TRANSLATED_E2E)
    response = harness.answer("mutate", review("pod-create-legacy-gpu-dryrun"))
    assert response["allowed"] is True
    assert patch_of(response)
    assert harness.source.created_templates == []
    assert harness.source.view.in_namespace(Kind.RESOURCE_CLAIM_TEMPLATE, "gpu-e2e") == {}


def test_a_hundred_admissions_of_one_shape_create_one_template(
    make_app: Callable[..., AppHarness],
) -> None:
    harness = make_app()
    for number in range(100):
        response = harness.answer("mutate", wrap(gpu_pod(f"p{number}"), uid=f"u{number}"))
        assert response["allowed"] is True
    assert len(harness.source.created_templates) == 1
    harness.answer("mutate", wrap(gpu_pod("bigger", 2), uid="other-shape"))
    assert len(harness.source.created_templates) == 2


def test_a_template_the_cluster_already_has_costs_no_api_call(
    make_app: Callable[..., AppHarness],
) -> None:
    probe = make_app()
    probe.answer("mutate", wrap(gpu_pod("probe")))
    (existing,) = probe.source.created_templates
    harness = make_app([*DEMO_NAMESPACES, existing])
    response = harness.answer("mutate", wrap(gpu_pod("p")))
    assert response["allowed"] is True
    assert harness.source.created_templates == []


def test_concurrent_admissions_of_a_new_shape_share_one_create() -> None:
    source = SlowSource(DEMO_NAMESPACES)
    bodies = [wrap(gpu_pod(f"p{n}", 1 + n % 2), uid=f"u{n}") for n in range(100)]
    responses = asyncio.run(admit_concurrently(source, bodies))
    assert all(r["allowed"] for r in responses)
    assert len(source.calls) == 2, source.calls  # two shapes: 1 GPU and 2 GPUs
    assert len(set(source.calls)) == 2
    templates = source.view.in_namespace(Kind.RESOURCE_CLAIM_TEMPLATE, NS)
    assert set(templates) == set(source.calls)


@pytest.mark.parametrize("failure", ["closed", "open"])
def test_a_failed_create_is_answered_per_the_failure_policy_with_the_api_error(
    failure: str,
) -> None:
    error = 'resourceclaimtemplates.resource.k8s.io is forbidden: User "system:serviceaccount:dra-webhook:dra-webhook" cannot create resource'
    source = SlowSource(DEMO_NAMESPACES, error=error)
    policy = policy_from(f"failure: {{templateCreate: {failure}}}")
    bodies = [wrap(gpu_pod(f"p{n}"), uid=f"u{n}") for n in range(5)]
    responses = asyncio.run(admit_concurrently(source, bodies, policy))
    assert len(source.calls) == 1, "concurrent waiters share the one failed create"
    for response in responses:
        if failure == "closed":
            assert response["allowed"] is False
            assert response["status"]["code"] == 500
            assert error in response["status"]["message"]
            assert "denied (fail closed)" in response["status"]["message"]
        else:
            assert response["allowed"] is True
            assert "patch" not in response
            assert error in response["warnings"][0]
            assert "admitted untranslated (fail open)" in response["warnings"][0]
    # the failure is not remembered: the next admission tries again
    source.error = ""
    (again,) = asyncio.run(admit_concurrently(source, [wrap(gpu_pod("later"))], policy))
    assert again["allowed"] is True
    assert len(source.calls) == 2


@pytest.mark.parametrize(
    ("refused", "code", "retry"),
    [(True, 403, False), (False, 500, True)],
    ids=["refused by the API server", "API server unreachable"],
)
def test_retry_later_is_said_only_where_a_retry_can_help(
    refused: bool, code: int, retry: bool
) -> None:
    error = "403 Forbidden: admission webhook denied the request" if refused else "unreachable"
    source = SlowSource(DEMO_NAMESPACES, error=error, refused=refused)
    (response,) = asyncio.run(admit_concurrently(source, [wrap(gpu_pod("p"))], None))
    assert response["allowed"] is False
    assert response["status"]["code"] == code
    assert ("retry later" in response["status"]["message"]) is retry


def test_a_translated_pod_passes_the_validating_webhook(
    make_app: Callable[..., AppHarness],
) -> None:
    harness = make_app()
    obj = gpu_pod("p", 2)
    mutated = harness.answer("mutate", wrap(obj))
    translated = apply(obj, patch_of(mutated))
    assert_valid(translated)  # the API server's schema, strictly
    assert_pod_rules(translated["spec"])  # and what the schema cannot say
    validated = harness.answer("validate", wrap(translated))
    assert validated == {"uid": "test-uid", "allowed": True}  # not even a warning left


class BrokenSource(SlowSource):
    async def create_claim_template(self, template: dict[str, Any]) -> None:
        raise RuntimeError("a bug, not an API error")


def test_a_bug_while_creating_a_template_is_answered_per_the_internal_error_policy() -> None:
    source = BrokenSource(DEMO_NAMESPACES)
    (response,) = asyncio.run(admit_concurrently(source, [wrap(gpu_pod("p"))]))
    assert response["allowed"] is True  # failure.internalError: open (the default)
    assert "patch" not in response
    assert "internal error" in response["warnings"][0]


# -- a template of translation's name that someone else wrote --------------------------------


def _our_template(count: int = 1) -> Obj:
    """The template translation builds for `gpu_pod(count)` in NS."""
    probe = build_app()
    try:
        probe.answer("mutate", wrap(gpu_pod("probe", count)))
        (template,) = probe.source.created_templates
    finally:
        probe.client.__exit__(None, None, None)
    return copy.deepcopy(template)


def _as_stored(template: Obj) -> Obj:
    """`template` as the API server returns it: server fields, and `spec.metadata: {}`."""
    stored = copy.deepcopy(template)
    stored["metadata"] |= {"uid": "u-1", "resourceVersion": "7", "generation": 1}
    stored["spec"] = {"metadata": {}, **stored["spec"]}
    return stored


def _unlabelled(template: Obj) -> Obj:
    template["metadata"].pop("labels")
    return template


def _all_devices(template: Obj) -> Obj:
    exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    exactly.pop("count")
    exactly["allocationMode"] = "All"
    return template


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        (lambda t: _all_devices(_unlabelled(t)), "is not labelled app.kubernetes.io/managed-by"),
        (_unlabelled, "is not labelled app.kubernetes.io/managed-by=dra-webhook"),
        (_all_devices, "its spec is not the one dra-webhook builds under that name"),
    ],
    ids=["unlabelled-all-devices", "unlabelled", "labelled-all-devices"],
)
@pytest.mark.parametrize("failure", ["closed", "open"])
def test_a_pod_whose_template_name_is_taken_by_other_content_is_denied(
    make_app: Callable[..., AppHarness], forge: Callable[[Obj], Obj], why: str, failure: str
) -> None:
    forged = forge(_as_stored(_our_template()))
    name = forged["metadata"]["name"]
    policy = policy_from(f"failure: {{templateCreate: {failure}}}")
    harness = make_app([*DEMO_NAMESPACES, forged], policy=policy)
    response = harness.answer("mutate", wrap(gpu_pod("p")))
    assert response["allowed"] is False  # whatever failure.templateCreate says
    assert "patch" not in response
    message = response["status"]["message"]
    assert f"ResourceClaimTemplate {NS}/{name} exists, but" in message
    assert why in message
    assert "does not reuse it" in message
    assert harness.source.created_templates == []
    kept = harness.source.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, name, NS)
    assert kept is not None and kept["spec"] == forged["spec"]
    assert 'dra_webhook_denials_total{reason="template-conflict",webhook="mutate"} 1.0' in (
        harness.metrics.render().decode()
    )


def test_our_own_template_as_the_api_server_stores_it_is_reused(
    make_app: Callable[..., AppHarness],
) -> None:
    harness = make_app([*DEMO_NAMESPACES, _as_stored(_our_template(2))])
    response = harness.answer("mutate", wrap(gpu_pod("p", 2)))
    assert response["allowed"] is True
    assert patch_of(response)
    assert harness.source.created_templates == []


def test_a_dry_run_is_denied_for_a_conflict_the_view_shows_and_creates_nothing(
    make_app: Callable[..., AppHarness],
) -> None:
    forged = _unlabelled(_as_stored(_our_template()))
    harness = make_app([*DEMO_NAMESPACES, forged])
    response = harness.answer("mutate", wrap(gpu_pod("p"), dry_run=True))
    assert response["allowed"] is False
    assert "is not labelled" in response["status"]["message"]
    assert harness.source.created_templates == []


def test_an_admitted_translation_is_counted_by_its_mapping_rule(
    make_app: Callable[..., AppHarness],
) -> None:
    harness = make_app()
    harness.answer("mutate", wrap(gpu_pod("p", 2)))
    rendered = harness.metrics.render().decode()
    assert 'dra_webhook_translations_total{rule="mapping"} 1.0' in rendered
