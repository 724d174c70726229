"""Journey dra-only: a namespace labelled gpu-mode=dra-only refuses device-plugin GPUs at apply
time, with the fix; an unlabelled namespace never reaches the webhook; DRA claims go through and
get scheduled."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e import objects as o
from tests.e2e.kube import ApiError, Kube
from tests.e2e.webhook import Webhook

pytestmark = [pytest.mark.journey("dra-only"), pytest.mark.usefixtures("webhook")]

LEGACY = o.pod_spec(o.container("cuda", limits={"nvidia.com/gpu": "2"}))


def _legacy_objects(namespace: str) -> list[dict[str, object]]:
    return [
        o.pod("trainer", namespace, LEGACY),
        o.deployment("trainer", namespace, LEGACY),
        o.cronjob("nightly", namespace, LEGACY),
    ]


def test_legacy_objects_in_an_unlabelled_namespace_never_reach_the_webhook(
    kube: Kube, webhook: Webhook, namespace: Callable[..., str]
) -> None:
    plain = namespace()
    before = webhook.reviews()
    for obj in _legacy_objects(plain):
        kube.create(obj)
    # the ReplicaSet controller's pod went through admission too, unlabelled
    kube.wait(lambda: kube.list("Pod", plain, labelSelector="app=trainer"), "the Deployment's pod")
    assert webhook.reviews() == before


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "CronJob"])
def test_a_legacy_gpu_request_is_denied_with_the_fix_and_nothing_is_stored(
    kind: str, kube: Kube, webhook: Webhook, namespace: Callable[..., str]
) -> None:
    """Denied by the chart's ValidatingAdmissionPolicy, inside the API server: the webhook is
    not called for it (the rule needs no cluster state)."""
    ns = namespace("dra-only")
    (obj,) = [x for x in _legacy_objects(ns) if x["kind"] == kind]
    before = webhook.reviews()
    with pytest.raises(ApiError) as denied:
        kube.create(obj)
    message = denied.value.message
    assert denied.value.status == 403, message
    assert (
        "ValidatingAdmissionPolicy 'dra-webhook-dra-only' with binding "
        "'dra-webhook-dra-only-deny' denied request" in message
    )
    assert f"namespace {ns} is dra-only" in message
    assert "container cuda asks for nvidia.com/gpu: 2" in message
    assert webhook.reviews() == before
    assert "nvidia.com/gpu: 2 -> use DeviceClass gpu.nvidia.com (count 2)" in message
    assert "resourceClaims:" in message and "resourceClaimTemplateName:" in message
    assert kube.find(kind, str(obj["metadata"]["name"]), ns) is None  # type: ignore[index]


def test_a_pod_with_dra_claims_is_admitted_and_scheduled(
    kube: Kube, webhook: Webhook, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only")
    kube.create(o.claim_template("one-gpu", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 1))))
    before = _pod_reviews(webhook)
    spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)),
        claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
    )
    kube.create(o.pod("trainer", ns, spec))
    # nothing for the webhook to do: no translation in dra-only namespaces, the dra-only rule is
    # the admission policy's, no quota selects this namespace; so the pod is never sent (the
    # claim the controller makes from the template is, for its selectors and quotas)
    assert _pod_reviews(webhook) == before
    placed = o.scheduled(kube, ns, "trainer")
    (claim,) = o.allocated_claims(kube, ns, "trainer").values()
    (device,) = o.allocated_devices(claim)
    assert device[1] == placed["spec"]["nodeName"]  # pool = node name: a device on that node
    assert claim["status"]["reservedFor"][0]["name"] == "trainer"


def test_a_pod_with_claims_in_a_namespace_a_quota_selects_is_sent_for_the_quota(
    kube: Kube, webhook: Webhook, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only", **{"dra-quota": "small"})  # tests/e2e/values.yaml: e2e-small
    kube.create(o.claim_template("one-gpu", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 1))))
    spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)),
        claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
    )
    before = _pod_reviews(webhook)
    kube.create(o.pod("trainer", ns, spec))
    assert _pod_reviews(webhook) == {
        "mutate": before["mutate"],  # no translation in dra-only namespaces
        "validate": before["validate"] + 1,  # pods-quota-0
    }


def _pod_reviews(webhook: Webhook) -> dict[str, float]:
    """Pod reviews answered so far, per webhook (mutate, validate)."""
    return {
        name: webhook.metric(
            "dra_webhook_admission_duration_seconds_count", webhook=name, kind="Pod"
        )
        for name in ("mutate", "validate")
    }


def test_an_audit_namespace_warns_of_a_deployment_once(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    """The chart's admission policy warns on CREATE; the webhook, which sees the Deployment for
    quotas, counts the finding but does not warn again (kubectl would print both)."""
    ns = namespace("audit")
    answer = kube.create(o.deployment("trainer", ns, LEGACY))
    offences = [w for w in answer.warnings if "nvidia.com/gpu" in w]
    assert len(offences) == 1, answer.warnings
    assert "would be denied in a dra-only namespace" in offences[0]
