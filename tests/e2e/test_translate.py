"""Journey translate: in a namespace labelled gpu-mode=translate, legacy GPU requests become DRA
claims on the way in; the controllers and the scheduler take it from there."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest

from tests.assets import k8s_tool
from tests.e2e import objects as o
from tests.e2e.controlplane import ControlPlane
from tests.e2e.fleet import DRIVER
from tests.e2e.kube import Kube

pytestmark = [pytest.mark.journey("translate"), pytest.mark.usefixtures("webhook")]

MANAGED = "app.kubernetes.io/managed-by"


def _only_pod(kube: Kube, namespace: str) -> dict[str, object]:
    def fetch() -> dict[str, object] | None:
        pods = kube.list("Pod", namespace)
        return pods[0] if len(pods) == 1 else None

    return kube.wait(fetch, f"the one pod in {namespace}")


def test_a_deployment_asking_two_gpus_ends_with_two_gpus_allocated_on_one_node(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("translate")
    legacy = o.pod_spec(o.container("cuda", limits={"nvidia.com/gpu": "2"}))
    stored = kube.create(o.deployment("trainer", ns, legacy)).obj
    # the Deployment is left as written (GitOps tools would see drift); its pods are translated
    limits = stored["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "2"}

    pod = _only_pod(kube, ns)  # made by the ReplicaSet controller, through admission
    spec = pod["spec"]
    (entry,) = spec["resourceClaims"]
    (cuda,) = spec["containers"]
    assert "nvidia.com/gpu" not in cuda["resources"].get("limits", {})
    assert "nvidia.com/gpu" not in cuda["resources"].get("requests", {})
    assert cuda["resources"]["claims"] == [{"name": entry["name"]}]
    # and the pod says what was translated, as the API server stored it
    assert pod["metadata"]["annotations"]["dra-webhook/translated"] == (
        f"nvidia.com/gpu=2 -> claim {entry['name']} (template {entry['resourceClaimTemplateName']})"
    )

    template = kube.get("ResourceClaimTemplate", entry["resourceClaimTemplateName"], ns)
    assert template["metadata"]["labels"][MANAGED] == "dra-webhook"
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert request["exactly"]["count"] == 2

    name = pod["metadata"]["name"]
    placed = o.scheduled(kube, ns, name)
    (claim,) = o.allocated_claims(kube, ns, name).values()  # made by the resourceclaim controller
    devices = o.allocated_devices(claim)
    assert len(devices) == 2 and len(set(devices)) == 2
    assert {pool for _, pool, _ in devices} == {placed["spec"]["nodeName"]}
    assert all(device.startswith("gpu-") and "mig" not in device for _, _, device in devices)
    assert (
        claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == entry["name"]
    )


def test_a_mig_request_ends_with_a_mig_device_of_that_profile_allocated(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("translate")
    legacy = o.pod_spec(o.container("infer", limits={"nvidia.com/mig-1g.10gb": "1"}))
    kube.create(o.pod("infer", ns, legacy))
    placed = o.scheduled(kube, ns, "infer")
    (claim,) = o.allocated_claims(kube, ns, "infer").values()
    ((_, pool, device),) = o.allocated_devices(claim)
    assert pool == placed["spec"]["nodeName"] == "node-a"  # the only node with 1g.10gb devices
    assert device.startswith("gpu-2-mig-1g10gb-")
    (exactly,) = [r["exactly"] for r in claim["spec"]["devices"]["requests"]]
    assert exactly["deviceClassName"] == "mig.nvidia.com"
    assert [s["cel"]["expression"] for s in exactly["selectors"]] == [
        f'device.attributes["{DRIVER}"].profile == "1g.10gb"'
    ]


def test_an_init_container_shares_the_app_containers_gpu_and_the_pod_holds_one(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("translate")
    spec = o.pod_spec(
        o.container("cuda", limits={"nvidia.com/gpu": "1"}),
        init=[o.container("warm", limits={"nvidia.com/gpu": "1"})],
    )
    kube.create(o.pod("trainer", ns, spec))
    stored = kube.get("Pod", "trainer", ns)["spec"]
    (entry,) = stored["resourceClaims"]
    assert stored["initContainers"][0]["resources"]["claims"] == [{"name": entry["name"]}]
    assert stored["containers"][0]["resources"]["claims"] == [{"name": entry["name"]}]
    o.scheduled(kube, ns, "trainer")
    (claim,) = o.allocated_claims(kube, ns, "trainer").values()
    assert len(o.allocated_devices(claim)) == 1  # what the device plugin would have given


def test_a_server_side_dry_run_translates_but_creates_no_template(
    control_plane: ControlPlane, kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("translate")
    legacy = o.pod("dry", ns, o.pod_spec(o.container("cuda", limits={"nvidia.com/gpu": "1"})))
    result = subprocess.run(
        [k8s_tool("kubectl"), "--kubeconfig", str(control_plane.kubeconfig()),
         "create", "--dry-run=server", "-o", "json", "-f", "-"],
        input=json.dumps(legacy), capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    answered = json.loads(result.stdout)
    (entry,) = answered["spec"]["resourceClaims"]  # the pod as it would have been stored
    assert entry["resourceClaimTemplateName"].startswith("dra-gpu-nvidia-com-1-")
    assert kube.list("ResourceClaimTemplate", ns) == []
    assert kube.find("Pod", "dry", ns) is None
