"""Journey faults: the webhook through an API server outage, and two replicas racing to create
the same ResourceClaimTemplate."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e import objects as o
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import ApiError, Kube
from tests.e2e.webhook import Webhook, start_webhook, stop_webhook
from tests.helpers import wrap

pytestmark = [pytest.mark.journey("faults"), pytest.mark.usefixtures("webhook")]

QUOTA = {"dra-quota": "small"}  # 4 devices of gpu.nvidia.com


def test_an_api_server_restart_turns_readyz_503_and_back_and_a_claim_made_meanwhile_is_counted(
    control_plane: ControlPlane, kube: Kube, webhook: Webhook, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only", **QUOTA)
    assert webhook.readyz() == 200
    control_plane.stop_apiserver()
    try:
        kube.wait(lambda: webhook.readyz() == 503, "/readyz 503 while the API server is down", 20)
    finally:
        control_plane.start_apiserver()
    # at once, while the webhook's view is still catching up: admitted (failure.staleView open)
    three = kube.create(o.claim("three", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 3))))
    assert three.obj["metadata"]["name"] == "three"
    kube.wait(lambda: webhook.readyz() == 200, "/readyz 200 once the view has resynced", 30)
    with pytest.raises(ApiError) as denied:
        kube.create(o.claim("two", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 2))))
    assert f"namespace {ns} allows 4, 3 in use (quota e2e-small)" in denied.value.message


@pytest.fixture
def second_webhook(
    control_plane: ControlPlane, kube: Kube, helm: str, webhook: Webhook
) -> Iterator[Webhook]:
    """Another replica: same identity, policy and certificates, not registered."""
    workdir = webhook.policy.parent
    other = start_webhook(control_plane, kube, helm, workdir, register=False)
    yield other
    stop_webhook(other)


def _template_of(answer: dict[str, object]) -> str:
    patch = json.loads(base64.b64decode(str(answer["patch"])))
    (claims,) = [op["value"] for op in patch if op["path"] == "/spec/resourceClaims"]
    (entry,) = claims
    return str(entry["resourceClaimTemplateName"])


def test_two_webhook_processes_admitting_the_same_pod_shape_at_once_create_one_template(
    kube: Kube, webhook: Webhook, second_webhook: Webhook, namespace: Callable[..., str]
) -> None:
    ns = namespace("translate")
    kube.wait(lambda: second_webhook.readyz() == 200, "the second replica's view")
    legacy = o.pod("twin", ns, o.pod_spec(o.container("cuda", limits={"nvidia.com/gpu": "3"})))
    legacy["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "3"

    def admit(server: Webhook, uid: str) -> dict[str, object]:
        with server.server.client() as client:
            http = client.post("/mutate?timeout=10s", json=wrap(legacy, uid=uid))
        assert http.status_code == 200, http.text
        answer: dict[str, object] = http.json()["response"]
        return answer

    metric = "dra_webhook_template_creates_total"
    before = [w.metric(metric, result="created") for w in (webhook, second_webhook)]
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(admit, (webhook, second_webhook), ("uid-1", "uid-2")))
    assert all(a["allowed"] for a in answers), answers
    names = {_template_of(a) for a in answers}
    assert len(names) == 1
    assert [t["metadata"]["name"] for t in kube.list("ResourceClaimTemplate", ns)] == list(names)
    after = [w.metric(metric, result="created") for w in (webhook, second_webhook)]
    created = [a - b for a, b in zip(after, before, strict=True)]
    assert sum(created) == 1, created  # the other replica got AlreadyExists, or saw it cached
