"""Journey satisfiability, the claim limit: a ResourceClaim holds at most 32 devices.

The API server stores a claim asking for more (validation bounds the number of requests, never
``count``, and cannot know how many devices ``allocationMode: All`` will match); the scheduler
then fails its pod with an error on every attempt (SchedulerError: "exceeds the claim limit of
32"). The webhook warns "never" for both, at the request, and the scheduler agrees; the same
All claim narrowed to 32 devices is admitted without a warning and allocated.

The devices are a pool of 33 on node-a from a driver of their own (``many.example.com``), so the
fleet the other journeys count is untouched; the pool and its class go when the module ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e import objects as o
from tests.e2e.kube import Kube

pytestmark = [pytest.mark.journey("satisfiability"), pytest.mark.usefixtures("webhook")]

Obj = dict[str, Any]
DRIVER = "many.example.com"
CLASS = "many.example.com"
DEVICES = 33
LIMIT_TEXT = "but a claim holds at most 32 devices (AllocationResultsMaxSize)"


@pytest.fixture(scope="module")
def many(kube: Kube, webhook: Any) -> Iterator[None]:
    """33 devices on node-a, and the class that selects them."""
    devices = [{"name": f"dev-{i}", "attributes": {"index": {"int": i}}} for i in range(DEVICES)]
    pool = {"name": "node-a-many", "generation": 1, "resourceSliceCount": 1}
    kube.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-a-many"},
            "spec": {"driver": DRIVER, "nodeName": "node-a", "pool": pool, "devices": devices},
        }
    )
    selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
    kube.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [selector]},
        }
    )
    yield
    kube.delete("DeviceClass", CLASS)
    kube.delete("ResourceSlice", "node-a-many")


def _all(*selectors: str) -> Obj:
    body: Obj = {"deviceClassName": CLASS, "allocationMode": "All"}
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"devices": {"requests": [{"name": "r0", "exactly": body}]}}


def _outcome(kube: Kube, ns: str, name: str, spec: Obj) -> tuple[list[str], str]:
    """The webhook's warnings on the claim, and what the scheduler does with a pod using it:
    "allocated", or the reason it gives for leaving the pod Pending."""
    answer = kube.create(o.claim(name, ns, spec))
    pod_spec = o.pod_spec(
        o.container("app", claims=("dev",)), claims=[{"name": "dev", "resourceClaimName": name}]
    )
    kube.create(o.pod(name, ns, pod_spec))

    def settled() -> str | None:
        pod = kube.get("Pod", name, ns)
        if pod["spec"].get("nodeName"):
            claim = kube.get("ResourceClaim", name, ns)
            return "allocated" if o.allocated_devices(claim) else None
        return o.unschedulable(pod)

    return answer.warnings, kube.wait(settled, f"the scheduler's answer on {name}", 60)


@pytest.mark.usefixtures("many")
def test_all_devices_of_a_node_with_33_fail_in_the_scheduler_and_are_warned_never(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    warnings, outcome = _outcome(kube, namespace("dra-only"), "all-33", _all())
    assert outcome.startswith("SchedulerError"), outcome
    assert "exceeds the claim limit of 32" in outcome
    assert any(
        w.startswith(
            "spec.devices.requests[0]: asks for all matching devices (allocationMode "
            "All), and 33 match on node-a"
        )
        and LIMIT_TEXT in w
        for w in warnings
    ), warnings


@pytest.mark.usefixtures("many")
def test_the_same_claim_narrowed_to_32_devices_is_admitted_and_allocated(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    narrowed = _all(f'device.attributes["{DRIVER}"].index < 32')
    warnings, outcome = _outcome(kube, namespace("dra-only"), "all-32", narrowed)
    assert outcome == "allocated"
    assert not [w for w in warnings if w.startswith("spec")], warnings


@pytest.mark.usefixtures("many")
def test_a_count_of_40_is_stored_fails_in_the_scheduler_and_is_warned_never(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    spec = {
        "devices": {
            "requests": [{"name": "r0", "exactly": {"deviceClassName": CLASS, "count": 40}}]
        }
    }
    warnings, outcome = _outcome(kube, namespace("dra-only"), "count-40", spec)
    assert outcome.startswith("SchedulerError"), outcome
    assert "exceeds the claim limit of 32" in outcome
    assert f"spec.devices.requests[0]: asks for 40 devices, {LIMIT_TEXT}" in " ".join(warnings)
