"""Journey sharing: HAMi-style pods in a gpu-mode=translate namespace become consumable-capacity
claims, which the real scheduler allocates as shares of one GPU (tests/e2e/fleet.py publishes a
shareable 80Gi H100 whose memory takes a validRange policy: min 1Gi, step 1Gi).

The scheduler rounds 4000Mi up to 4Gi (min + n*step) and records it as the share's
`consumedCapacity`, with a `shareID` per allocation; two pods get two shares of the same device.
A request above every device's capacity is left unallocated by the scheduler (Unschedulable,
no error anywhere): the webhook refusing it first needs the scheduler-exact capacity model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.k8s.quantity import parse_quantity
from tests.e2e import objects as o
from tests.e2e.fleet import DRIVER, SHARED_CLASS, SHARED_POOL, SHARING_SINCE
from tests.e2e.kube import Kube

pytestmark = [
    pytest.mark.journey("sharing"),
    pytest.mark.usefixtures("webhook"),
    pytest.mark.since(SHARING_SINCE, "consumable capacity (DRAConsumableCapacity) is off"),
]

Obj = dict[str, Any]
SHARED_GPU = (SHARED_POOL, "gpu-s0")


def _hami(name: str, namespace: str, memory_mib: int) -> Obj:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory_mib)}
    return o.pod(name, namespace, o.pod_spec(o.container("cuda", limits=limits)))


def _share(kube: Kube, namespace: str, name: str) -> Obj:
    """The one allocation result of the pod's one claim, once the scheduler made it."""
    o.scheduled(kube, namespace, name)
    (claim,) = o.allocated_claims(kube, namespace, name).values()
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert isinstance(result, dict)
    return result


def test_a_hami_pod_ends_with_its_claim_allocated_on_a_shareable_gpu_with_the_consumed_capacity(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("translate")
    stored = kube.create(_hami("infer", ns, 4000)).obj
    (cuda,) = stored["spec"]["containers"]
    assert not {"nvidia.com/gpu", "nvidia.com/gpumem"} & set(cuda["resources"].get("limits", {}))
    (entry,) = stored["spec"]["resourceClaims"]
    template = kube.get("ResourceClaimTemplate", entry["resourceClaimTemplateName"], ns)
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == SHARED_CLASS
    assert request["exactly"]["capacity"]["requests"] == {"memory": "4000Mi"}

    result = _share(kube, ns, "infer")
    assert (result["driver"], result["pool"], result["device"]) == (DRIVER, *SHARED_GPU)
    # the scheduler's rounding: 4000Mi up to min + n*step = 4Gi
    assert parse_quantity(result["consumedCapacity"]["memory"]) == parse_quantity("4Gi")
    assert result.get("shareID")


def test_two_hami_pods_share_one_gpu(kube: Kube, namespace: Callable[..., str]) -> None:
    ns = namespace("translate")
    kube.create(_hami("small", ns, 4000))
    kube.create(_hami("large", ns, 8192))
    small, large = _share(kube, ns, "small"), _share(kube, ns, "large")
    assert (small["pool"], small["device"]) == (large["pool"], large["device"]) == SHARED_GPU
    assert small["shareID"] != large["shareID"]
    assert parse_quantity(small["consumedCapacity"]["memory"]) == parse_quantity("4Gi")
    assert parse_quantity(large["consumedCapacity"]["memory"]) == parse_quantity("8Gi")


def test_a_share_above_every_devices_capacity_is_named_by_the_webhook_when_the_pod_is_created(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    """The chart's default policy warns (`cel.selectors.unsatisfiable: warn`; `deny` refuses, as
    tests/policies/test_sharing.py shows): the author reads why the pod will stay Pending."""
    ns = namespace("translate")
    answer = kube.create(_hami("huge", ns, 100_000), dry_run=True)  # above the 80Gi of any device
    (never,) = [w for w in answer.warnings if "can give it" in w]
    assert "asks for 1 device with capacity {memory: 100000Mi}" in never
    assert "the most memory a device allows is 80Gi" in never


def test_a_share_above_every_devices_capacity_is_left_unallocated_by_the_scheduler(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    """Without the webhook (an unlabelled namespace): the claim translation would make for
    `nvidia.com/gpumem: 100000`, as a template the pod references."""
    ns = namespace()
    exactly = {
        "deviceClassName": SHARED_CLASS,
        "count": 1,
        "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
        "capacity": {"requests": {"memory": "100000Mi"}},
    }
    spec = o.claim_spec(exactly)
    kube.create(o.claim_template("huge", ns, spec))
    pod_spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)),
        claims=[{"name": "gpu", "resourceClaimTemplateName": "huge"}],
    )
    kube.create(o.pod("huge", ns, pod_spec))
    reason = kube.wait(
        lambda: o.unschedulable(kube.get("Pod", "huge", ns)), "the scheduler to give up for now"
    )
    assert reason.startswith("Unschedulable"), reason
    pod = kube.get("Pod", "huge", ns)
    assert not pod["spec"].get("nodeName")
    claims = o.claims_of(kube, pod) or {}
    assert all(not o.allocated_devices(c) for c in claims.values())
