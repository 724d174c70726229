"""Journey defaults: a claim that names no DeviceClass gets its namespace's default class from
the mutating webhook, and the scheduler allocates it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e import objects as o
from tests.e2e.kube import Kube

pytestmark = [pytest.mark.journey("defaults"), pytest.mark.usefixtures("webhook")]


def test_a_claim_without_a_class_gets_the_namespace_default_and_is_allocated(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only", **{"default-class": "gpu"})  # tests/e2e/values.yaml
    answer = kube.create(o.claim("gpu", ns, o.claim_spec(o.exactly(None, 1))))
    (request,) = answer.obj["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert any("dra-webhook added" in w and "gpu.nvidia.com" in w for w in answer.warnings), (
        answer.warnings
    )

    spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)), claims=[{"name": "gpu", "resourceClaimName": "gpu"}]
    )
    kube.create(o.pod("trainer", ns, spec))
    placed = o.scheduled(kube, ns, "trainer")
    (claim,) = o.allocated_claims(kube, ns, "trainer").values()
    ((_, pool, device),) = o.allocated_devices(claim)
    assert pool == placed["spec"]["nodeName"]
    assert "mig" not in device
