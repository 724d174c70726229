"""Journey quotas: the webhook refuses, at apply time and with the arithmetic, workloads whose
pods would go over a namespace's DRA device quota; native ResourceQuota stays the hard stop."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e import objects as o
from tests.e2e.kube import ApiError, Kube

pytestmark = [pytest.mark.journey("quotas"), pytest.mark.usefixtures("webhook")]

QUOTA = {"dra-quota": "small"}  # tests/e2e/values.yaml: 4 devices of gpu.nvidia.com


def _gpus(n: int) -> dict[str, object]:
    return o.pod_spec(o.container("cuda", limits={"nvidia.com/gpu": str(n)}))


def test_a_deployment_whose_replicas_times_devices_exceed_the_quota_is_denied(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("translate", **QUOTA)
    with pytest.raises(ApiError) as denied:
        kube.create(o.deployment("trainer", ns, _gpus(2), replicas=3))
    assert denied.value.status == 403
    assert (
        f"Deployment trainer needs 3 replicas x 2 devices of gpu.nvidia.com = 6; "
        f"namespace {ns} allows 4, 0 in use (quota e2e-small)"
    ) in denied.value.message
    assert kube.find("Deployment", "trainer", ns) is None


def test_scaling_a_deployment_past_the_quota_is_denied_with_what_is_in_use(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("translate", **QUOTA)
    kube.create(o.deployment("trainer", ns, _gpus(1), replicas=2))

    def claims_made() -> list[dict[str, object]] | None:
        claims = kube.list("ResourceClaim", ns)
        return claims if len(claims) == 2 else None

    kube.wait(claims_made, "the two pods' claims")
    with pytest.raises(ApiError) as denied:
        kube.patch("Deployment", "trainer", ns, {"spec": {"replicas": 5}})
    assert (
        "Deployment trainer needs 5 replicas x 1 device of gpu.nvidia.com = 5 (2 before this "
        f"change); namespace {ns} allows 4, 2 in use (quota e2e-small)"
    ) in denied.value.message
    assert kube.get("Deployment", "trainer", ns)["spec"]["replicas"] == 2
    kube.patch("Deployment", "trainer", ns, {"spec": {"replicas": 4}})  # 2 + 2 = 4 fits


def test_a_resource_quota_hard_limit_is_respected(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only")
    resource = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpus", "namespace": ns},
            "spec": {"hard": {resource: "2"}},
        }
    )
    kube.wait(
        lambda: kube.get("ResourceQuota", "gpus", ns).get("status", {}).get("hard"),
        "the quota's status (resourcequota controller)",
    )
    kube.create(o.claim_template("one", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 1))))
    spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)),
        claims=[{"name": "gpu", "resourceClaimTemplateName": "one"}],
    )
    # the webhook: 3 pods x 1 device over a hard limit of 2, refused before any pod exists
    with pytest.raises(ApiError) as denied:
        kube.create(o.deployment("trainer", ns, spec, replicas=3))
    assert "ResourceQuota gpus" in denied.value.message, denied.value.message
    assert "= 3" in denied.value.message

    # the API server: claims are charged atomically; the third device is refused
    kube.create(o.claim("two", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 2))))
    with pytest.raises(ApiError) as refused:
        kube.create(o.claim("three", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 1))))
    assert refused.value.status == 403
    assert "exceeded quota: gpus" in refused.value.message  # the API server, not the webhook
    assert kube.find("ResourceClaim", "three", ns) is None
    used = kube.wait(
        lambda: (
            kube.get("ResourceQuota", "gpus", ns).get("status", {}).get("used", {}).get(resource)
        ),
        "the quota's usage",
    )
    assert used == "2"


def test_a_pod_translated_over_a_per_claim_quota_is_denied_plainly_and_no_template_is_made(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    """The quota's verdict on the claims translation would make comes at mutation, before any
    ResourceClaimTemplate is created: not an InternalError about a template create that the
    webhook's own validation of templates refused."""
    ns = namespace("translate", **{"dra-quota": "per-claim"})  # values.yaml: 2 per claim
    with pytest.raises(ApiError) as denied:
        kube.create(o.pod("trainer", ns, _gpus(4)))
    message = denied.value.message
    assert denied.value.status == 403, message
    assert "InternalError" not in str(denied.value.body) and "retry later" not in message
    assert (
        "container cuda asks for nvidia.com/gpu: 4, which translation turns into a claim for "
        "4 devices of gpu.nvidia.com; at most 2 per claim (quota e2e-per-claim)"
    ) in message
    assert kube.list("ResourceClaimTemplate", ns) == []
    kube.create(o.pod("small", ns, _gpus(2)))  # within the quota: translated as before
    assert [t["metadata"]["name"] for t in kube.list("ResourceClaimTemplate", ns)]
