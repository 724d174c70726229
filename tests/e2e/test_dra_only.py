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
    kind: str, kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only")
    (obj,) = [x for x in _legacy_objects(ns) if x["kind"] == kind]
    with pytest.raises(ApiError) as denied:
        kube.create(obj)
    entry = "pods" if kind == "Pod" else "cronjobs" if kind == "CronJob" else "workloads"
    message = denied.value.message
    assert denied.value.status == 403, message
    assert f'admission webhook "{entry}.dra-webhook.svc" denied the request' in message
    assert f"namespace {ns} is dra-only" in message
    assert "nvidia.com/gpu: 2 -> use DeviceClass gpu.nvidia.com (count 2)" in message
    assert "resourceClaims:" in message and "resourceClaimTemplateName:" in message
    assert kube.find(kind, str(obj["metadata"]["name"]), ns) is None  # type: ignore[index]


def test_a_pod_with_dra_claims_is_admitted_and_scheduled(
    kube: Kube, webhook: Webhook, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only")
    kube.create(o.claim_template("one-gpu", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 1))))
    before = webhook.reviews()
    spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)),
        claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
    )
    kube.create(o.pod("trainer", ns, spec))
    assert webhook.reviews() >= before + 2  # /mutate and /validate: it was sent, and allowed
    placed = o.scheduled(kube, ns, "trainer")
    (claim,) = o.allocated_claims(kube, ns, "trainer").values()
    (device,) = o.allocated_devices(claim)
    assert device[1] == placed["spec"]["nodeName"]  # pool = node name: a device on that node
    assert claim["status"]["reservedFor"][0]["name"] == "trainer"
