"""Translation that leaves the plain case to the scheduler (`translation.leaveMapped`), through the
pipeline: the mutating answer leaves a mapped `nvidia.com/gpu: N` as written and says why, still
translates MIG and sharing pods of the same namespace, judges what it left as the scheduler's
claim (satisfiability, quota) with what it made, and counts it by rule in the metrics."""

from __future__ import annotations

import functools
from typing import Any

import jsonpatch
import orjson

from app.pipeline import Endpoint, Pipeline
from app.policies.translate_judged import JUDGED_ANNOTATION
from app.transport.review import decode_review
from tests.helpers import build_app, make_pipeline, namespace, policy_from, wrap
from tests.policies.mapped_objects import (
    CLASS,
    GPU,
    cluster,
    container,
    deployment,
    pipeline,
    pod,
    review,
)

Obj = dict[str, Any]
NS = "ml-research"
LEAVING = "translation: {leaveMapped: true}"
LEFT = (
    "container cuda: left nvidia.com/gpu: 2 to the scheduler: DeviceClass gpu.nvidia.com maps it "
    "(extendedResourceName)"
)


@functools.cache
def leaving(policy: str = LEAVING) -> Pipeline:
    return pipeline(policy=policy_from(policy))


def mutate(obj: Obj, where: Pipeline | None = None) -> Any:
    return review(where or leaving(), obj, endpoint=Endpoint.MUTATE)


def hami(name: str, count: int = 1, memory: str = "4000") -> Obj:
    asked = {GPU: str(count), "nvidia.com/gpumem": memory}
    return {"name": name, "image": "cuda", "resources": {"limits": asked, "requests": asked}}


def test_a_plain_mapped_pod_is_left_as_written_saying_which_class_serves_it() -> None:
    decision = mutate(pod(NS, container("cuda", 2)))
    assert decision.allowed
    assert decision.patch == ()  # as written: no claim, no annotation, no mark
    assert decision.warnings == (LEFT,)
    assert decision.translated == ("left:deviceclass",)
    assert not decision.templates


def test_mig_and_sharing_pods_in_the_same_namespace_are_still_translated() -> None:
    mig = mutate(pod(NS, container("slice", 1, "nvidia.com/mig-1g.10gb")))
    assert mig.allowed and mig.templates
    assert mig.translated == ("mapping",)
    shared = mutate(pod(NS, hami("share")))
    assert shared.allowed and shared.templates
    assert shared.translated == ("sharing:hami",)
    patched = jsonpatch.apply_patch(pod(NS, hami("share")), list(shared.patch))
    assert "limits" not in patched["spec"]["containers"][0]["resources"]


def test_a_pod_mixing_both_keeps_the_plain_request_and_translates_the_share() -> None:
    obj = pod(NS, container("cuda", 2), hami("share"))
    decision = mutate(obj)
    assert decision.allowed
    assert LEFT in decision.warnings
    assert sorted(decision.translated) == ["left:deviceclass", "sharing:hami"]
    patched = jsonpatch.apply_patch(obj, list(decision.patch))
    cuda, share = patched["spec"]["containers"]
    assert cuda["resources"]["limits"] == {GPU: "2"}
    assert "claims" not in cuda["resources"]
    assert share["resources"]["claims"] == [{"name": "gpu-share"}]
    # judged whole: the mark names the claim made; the left name still sends the pod to its
    # validating call (any extended resource does), which judges it as the scheduler's claim
    annotations = patched["metadata"]["annotations"]
    assert annotations[JUDGED_ANNOTATION].startswith("t:dra-gpu-shared-nvidia-com-1-")
    assert "nvidia.com/gpu=2" not in annotations["dra-webhook/translated"]


def test_what_is_left_is_judged_as_the_scheduler_claim_with_the_claims_translation_makes() -> None:
    # 16 whole GPUs on 8-GPU nodes: never, warned (a device-plugin node might serve it), once
    alone = mutate(pod(NS, container("cuda", 16)))
    never = [w for w in alone.warnings if "never" in w]
    assert never == [
        "spec.containers[0].resources.limits[nvidia.com/gpu]: asks for 16 nvidia.com/gpu, which "
        "the scheduler serves from DeviceClass gpu.nvidia.com (extendedResourceName): never: the "
        "most on any node is 8 (node-a, node-b)"
    ]
    # 8 left and 1 translated of the same class: each fits a node, both together none. The
    # claim translation makes is judged with the one the scheduler makes, as it allocates them
    where = leaving(
        f"{LEAVING}\nmappings: [{{resource: nvidia.com/gpu, deviceClassName: {CLASS}}}, "
        f"{{resource: amd.com/gpu, deviceClassName: {CLASS}}}]"
    )
    beside = mutate(pod(NS, container("cuda", 8), container("rocm", 1, "amd.com/gpu")), where)
    assert beside.allowed and beside.templates
    assert beside.warnings[-1] == (
        "spec.resourceClaims: each of the 2 requests can be satisfied on some node, but no node "
        "has enough devices for all of them together (a pod's claims are allocated on one node)"
    )


QUOTA = f"""{LEAVING}
quotas:
  - name: team
    namespaceSelector: {{matchLabels: {{team: leave}}}}
    maxDevicesPerRequest: {{{CLASS}: 1}}
"""


def test_the_validating_call_judges_the_left_request_as_the_scheduler_claim() -> None:
    where = make_pipeline(
        cluster(namespace("ml-leave", "translate", team="leave")), policy_from(QUOTA)
    )
    obj = pod("ml-leave", container("cuda", 2))
    validated = review(where, obj)
    assert not validated.allowed
    assert "at most 1 per request" in validated.message, validated.message
    # and the mutating call, which judges what validation would, denies it first
    mutated = review(where, obj, endpoint=Endpoint.MUTATE)
    assert not mutated.allowed
    assert mutated.message == validated.message


def test_a_workload_is_told_what_its_pods_will_leave_to_the_scheduler() -> None:
    decision = review(leaving(), deployment(NS, 2, container("cuda", 2)))
    assert decision.allowed
    assert (
        "container cuda: nvidia.com/gpu: 2 is left to the scheduler when its pods are created: "
        "DeviceClass gpu.nvidia.com maps it (extendedResourceName) (gpu-mode=translate)"
    ) in decision.warnings


def test_with_workload_translation_a_template_keeps_what_is_left() -> None:
    where = leaving("translation: {leaveMapped: true, translateWorkloads: true}")
    obj = deployment(NS, 2, container("cuda", 2), container("rocm", 1, "amd.com/gpu"))
    decision = review(where, obj, endpoint=Endpoint.MUTATE)
    assert decision.allowed
    patched = jsonpatch.apply_patch(obj, list(decision.patch))
    cuda, rocm = patched["spec"]["template"]["spec"]["containers"]
    assert cuda["resources"]["limits"] == {GPU: "2"}
    assert rocm["resources"]["claims"] == [{"name": "gpu-rocm"}]


def test_left_requests_are_counted_by_rule_among_the_translations() -> None:
    harness = build_app(cluster(), policy_from(LEAVING))
    try:
        response = harness.answer("mutate", wrap(pod(NS, container("cuda", 2))))
        assert response["allowed"] is True
        assert "patch" not in response
        assert response["warnings"] == [LEFT]
        rendered = harness.metrics.render().decode()
        assert 'dra_webhook_translations_total{rule="left:deviceclass"} 1.0' in rendered
    finally:
        harness.client.__exit__(None, None, None)


def test_a_left_pod_reviewed_again_changes_nothing() -> None:
    obj = pod(NS, container("cuda", 2), hami("share"))
    first = mutate(obj)
    again = jsonpatch.apply_patch(obj, list(first.patch))
    second = leaving().review(Endpoint.MUTATE, decode_review(orjson.dumps(wrap(again))))
    assert second.allowed
    assert second.patch == ()
