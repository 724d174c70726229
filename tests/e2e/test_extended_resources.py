"""Journey extended-resources: a DeviceClass that maps `nvidia.com/gpu` (KEP-5004, beta and on
in 1.36), the real scheduler serving plain legacy pods from DRA, and the webhook beside it.

The fleet's `gpu.nvidia.com` gets `spec.extendedResourceName: nvidia.com/gpu` for this journey
(as NVIDIA's driver chart sets it), and is given it back without it at the end. The fleet's Nodes
advertise no `nvidia.com/gpu` (no device plugin runs), so every node is a DRA node for it.

A webhook of its own serves the journey, registered from the chart under another release name
with `policy.draOnly.mappedNames: allow` and the mode label `gpu-mode-mapped` (the session's
webhook and admission policy never see these namespaces, and the other journeys keep theirs):
with mapped names allowed the chart renders no dra-only admission policy, and the webhook sees
every pod that asks for an extended resource in dra-only and audit namespaces.

- a plain `nvidia.com/gpu: 1` pod in a dra-only namespace is admitted with the warning that
  names the class; the scheduler places it on a node, writes its claim (annotation
  `resource.kubernetes.io/extended-resource-claim`) and allocates it, and records
  `status.extendedResourceClaimStatus`;
- a pod asking for more mapped GPUs than any node has is warned "never" at admission, and the
  scheduler agrees (Unschedulable);
- a Deployment over a namespace's `gpu.nvidia.com.deviceclass.resource.k8s.io/devices`
  ResourceQuota, counted with its mapped pods, is refused with the arithmetic;
- `report --kubeconfig` says the pod is served by DRA through that class, and that no node needs
  a device plugin for it.

A third webhook (release `dra-webhook-leave`, label `gpu-mode-leave`) translates with
`policy.translation.leaveMapped: true`; its chart renders the admission policy, whose translate
binding refuses legacy names on pods the webhook judged, except the names the policy leaves:

- in a translate namespace a plain `nvidia.com/gpu: 1` pod is left as written, with the warning
  that names the class, and the scheduler serves it through its own claim;
- a MIG pod and a HAMi share pod in the same namespace are still translated and scheduled;
- a pod with a claim of its own (judged whole by the mutating call, so held by the admission
  policy) and a left `nvidia.com/gpu` is admitted, not refused, and scheduled with both.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app.k8s.objects import PodSpecRef
from app.policies.mapped import mapped_requests
from tests.e2e import objects as o
from tests.e2e.controlplane import WEBHOOK, ControlPlane
from tests.e2e.fleet import GPUS_PER_NODE, NODES
from tests.e2e.kube import ApiError, Kube
from tests.e2e.webhook import CHART, ENV, NAMESPACE
from tests.helpers import TlsServer, make_view, start_server, stop_server
from tests.report.peak import run_report

pytestmark = [
    pytest.mark.journey("extended-resources"),
    pytest.mark.usefixtures("webhook"),
    pytest.mark.since(
        36, "the scheduler serves extended resources from DRA (DRAExtendedResource) from 1.36"
    ),
]

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
CLASS = "gpu.nvidia.com"
LABEL = "gpu-mode-mapped"
RELEASE = "dra-webhook-mapped"
SPECIAL = "resource.kubernetes.io/extended-resource-claim"
DEVICES = f"{CLASS}.deviceclass.resource.k8s.io/devices"
VALUES = {
    "webhook": {"namespaceScope": "labelled", "deviceClasses": False},
    "policy": {"namespaceModes": {"label": LABEL}, "draOnly": {"mappedNames": "allow"}},
}


def _render(helm: str, values: Path, *args: str) -> list[Obj]:
    result = subprocess.run(
        [helm, "template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values), *args],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


class Mapped:
    """The journey's webhook: its process, what it registered, its policy file."""

    def __init__(self, server: TlsServer, configurations: list[Obj], policy: Path) -> None:
        self.server = server
        self.configurations = configurations
        self.policy = policy


@pytest.fixture(scope="module")
def mapping(kube: Kube) -> Iterator[None]:
    """gpu.nvidia.com maps nvidia.com/gpu for the journey."""
    kube.patch("DeviceClass", CLASS, None, {"spec": {"extendedResourceName": GPU}})
    yield
    kube.patch("DeviceClass", CLASS, None, {"spec": {"extendedResourceName": None}})


@pytest.fixture(scope="module")
def mapped_webhook(
    control_plane: ControlPlane,
    kube: Kube,
    helm: str,
    mapping: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Mapped]:
    """`dra-webhook serve` with the chart's policy for `VALUES`, under the session webhook's
    identity and RBAC, registered from the chart's configurations for release `RELEASE`."""
    workdir = tmp_path_factory.mktemp("mapped-webhook")
    values = workdir / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    (config,) = _render(helm, values, "--show-only=templates/configmap.yaml")
    policy = workdir / "policy.yaml"
    policy.write_text(config["data"]["policy.yaml"])
    server = start_server(
        workdir,
        "--kubeconfig", str(control_plane.kubeconfig(WEBHOOK)), "--config", str(policy),
        env=ENV,
    )  # fmt: skip
    ca_bundle = base64.b64encode((server.cert_dir / "ca.crt").read_bytes()).decode()
    configurations = _render(
        helm,
        values,
        "--show-only=templates/webhooks.yaml",
        f"--set=webhook.url={server.base_url}",
        f"--set=webhook.caBundle={ca_bundle}",
    )
    kinds = {doc["kind"] for doc in configurations}
    assert kinds == {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}, kinds
    shown = _render(helm, values)
    assert not [d for d in shown if d["kind"] == "ValidatingAdmissionPolicy"], (
        "mappedNames: allow leaves the dra-only rule to the webhook"
    )
    for doc in configurations:
        kube.apply(doc)
    running = Mapped(server, configurations, policy)
    try:
        _wait_until_called(kube)
        yield running
    finally:
        for doc in configurations:
            kube.delete(doc["kind"], doc["metadata"]["name"])
        stop_server(server)


LEAVE_LABEL = "gpu-mode-leave"
LEAVE_RELEASE = "dra-webhook-leave"
LEAVE_VALUES = {
    "webhook": {"namespaceScope": "labelled", "deviceClasses": False},
    "policy": {"namespaceModes": {"label": LEAVE_LABEL}, "translation": {"leaveMapped": True}},
}
LEFT = (
    "container cuda: left nvidia.com/gpu: 1 to the scheduler: DeviceClass gpu.nvidia.com maps it "
    "(extendedResourceName)"
)


@pytest.fixture(scope="module")
def leaving_webhook(
    control_plane: ControlPlane,
    kube: Kube,
    helm: str,
    mapping: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Mapped]:
    """`dra-webhook serve` translating with `translation.leaveMapped: true`, registered with the
    chart's webhook configurations and its admission policy for release `LEAVE_RELEASE`."""
    workdir = tmp_path_factory.mktemp("leaving-webhook")
    values = workdir / "values.yaml"
    values.write_text(yaml.safe_dump(LEAVE_VALUES))

    def render(*args: str) -> list[Obj]:
        result = subprocess.run(
            [helm, "template", LEAVE_RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values),
             *args],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    (config,) = render("--show-only=templates/configmap.yaml")
    policy = workdir / "policy.yaml"
    policy.write_text(config["data"]["policy.yaml"])
    server = start_server(
        workdir,
        "--kubeconfig", str(control_plane.kubeconfig(WEBHOOK)), "--config", str(policy),
        env=ENV,
    )  # fmt: skip
    ca_bundle = base64.b64encode((server.cert_dir / "ca.crt").read_bytes()).decode()
    configurations = render(
        "--show-only=templates/webhooks.yaml",
        "--show-only=templates/admissionpolicy.yaml",
        f"--set=webhook.url={server.base_url}",
        f"--set=webhook.caBundle={ca_bundle}",
    )
    assert "ValidatingAdmissionPolicy" in {doc["kind"] for doc in configurations}
    for doc in configurations:
        kube.apply(doc)
    running = Mapped(server, configurations, policy)
    try:
        _wait_until_leaving(kube)
        yield running
    finally:
        for doc in reversed(configurations):
            kube.delete(doc["kind"], doc["metadata"]["name"])
        stop_server(server)


def _wait_until_leaving(kube: Kube) -> None:
    """The API server calls the journey's leaving webhook (a plain pod comes back with the
    warning, its view has the class's mapping) and holds pods to its admission policy (a judged
    pod that asks for a MIG profile is refused: tests/chart/test_chart_leave.py)."""
    probe = "leaving-webhook-probe"
    kube.namespace(probe, **{LEAVE_LABEL: "translate"})
    kube.namespace(f"{probe}-dra-only", **{LEAVE_LABEL: "dra-only"})

    def left() -> bool:
        answer = kube.create(o.pod("probe", probe, _gpus(1)), dry_run=True)
        return any("to the scheduler: DeviceClass" in w for w in answer.warnings)

    def enforced() -> bool:
        try:
            kube.create(o.pod("probe", f"{probe}-dra-only", _gpus(1)), dry_run=True)
        except ApiError as error:
            return f"ValidatingAdmissionPolicy '{LEAVE_RELEASE}-dra-only'" in error.message
        return False

    kube.wait(left, "the leaving webhook to leave a mapped name to the scheduler", 30)
    kube.wait(enforced, "the API server to enforce the leaving release's admission policy", 30)


def _wait_until_called(kube: Kube) -> None:
    """The API server calls the journey's webhook once its informers have the configurations,
    and the webhook's view has the class's mapping once a mapped pod is let through."""
    probe = "mapped-webhook-probe"
    kube.namespace(probe, **{LABEL: "dra-only"})

    def pod(resource: str) -> Obj:
        spec = o.pod_spec(o.container("c", limits={resource: "1"}))
        return o.pod("probe", probe, spec)

    def called() -> bool:
        try:
            kube.create(pod("amd.com/gpu"), dry_run=True)
        except ApiError as error:
            return f"is dra-only ({LABEL}=dra-only)" in error.message
        return False

    def mapped() -> bool:
        warnings = kube.create(pod(GPU), dry_run=True).warnings
        return any(f"the scheduler serves it from DeviceClass {CLASS}" in w for w in warnings)

    kube.wait(called, "the API server to call the journey's webhook", 30)
    kube.wait(mapped, "the journey's webhook to see the class's extendedResourceName", 30)


def _gpus(n: int) -> Obj:
    return o.pod_spec(o.container("cuda", limits={GPU: str(n)}))


def _scheduled(kube: Kube, name: str, ns: str) -> Obj | None:
    found = kube.get("Pod", name, ns)
    status = found.get("status", {})
    if found["spec"].get("nodeName") and status.get("extendedResourceClaimStatus"):
        return found
    return None


def _special_claim(kube: Kube, ns: str) -> Obj | None:
    claims = [c for c in kube.list("ResourceClaim", ns) if c["metadata"].get("annotations")]
    for claim in claims:
        if claim["metadata"]["annotations"].get(SPECIAL) == "true" and claim.get("status", {}).get(
            "allocation"
        ):
            return claim
    return None


def test_a_plain_legacy_pod_is_scheduled_by_the_scheduler_from_the_class_that_maps_it(
    kube: Kube, mapped_webhook: Mapped, namespace: Callable[..., str]
) -> None:
    ns = namespace(**{LABEL: "dra-only"})
    answer = kube.create(o.pod("cuda", ns, _gpus(1)))
    assert answer.warnings == [
        f"spec.containers[0].resources.limits[{GPU}]: container cuda asks for {GPU}: 1: allowed: "
        f"the scheduler serves it from DeviceClass {CLASS}; nodes still running the device "
        "plugin would serve it there"
    ]
    pod = kube.wait(lambda: _scheduled(kube, "cuda", ns), "the pod scheduled from DRA", 60)
    assert pod["spec"]["nodeName"] in NODES
    claim = kube.wait(lambda: _special_claim(kube, ns), "the scheduler's claim, allocated")
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Pod", "cuda", True)
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"] == {
        "deviceClassName": CLASS,
        "allocationMode": "ExactCount",
        "count": 1,
    }
    # the request's name is the one app/policies/mapped.py gives it (cpu sorts first)
    view = make_view([kube.get("DeviceClass", CLASS, None)])
    spec = PodSpecRef.of(pod["spec"], "spec", "/spec", pod["metadata"])
    (ours,) = mapped_requests(spec, view)
    assert request["name"] == ours.request_name == "container-0-request-1"
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == pod["spec"]["nodeName"]
    status = pod["status"]["extendedResourceClaimStatus"]
    assert status["resourceClaimName"] == claim["metadata"]["name"]
    assert status["requestMappings"] == [
        {"containerName": "cuda", "resourceName": GPU, "requestName": "container-0-request-1"}
    ]


def test_a_pod_asking_more_mapped_gpus_than_any_node_has_is_warned_never_and_stays_pending(
    kube: Kube, mapped_webhook: Mapped, namespace: Callable[..., str]
) -> None:
    ns = namespace(**{LABEL: "dra-only"})
    wanted = GPUS_PER_NODE + 1
    answer = kube.create(o.pod("big", ns, _gpus(wanted)))
    assert (
        f"spec.containers[0].resources.limits[{GPU}]: asks for {wanted} {GPU}, which the "
        f"scheduler serves from DeviceClass {CLASS} (extendedResourceName): never: the most on "
        f"any node is {GPUS_PER_NODE} ({', '.join(NODES)})"
    ) in answer.warnings

    def unschedulable() -> Obj | None:
        conditions = kube.get("Pod", "big", ns).get("status", {}).get("conditions", [])
        return next(
            (c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"),
            None,
        )

    condition = kube.wait(unschedulable, "the scheduler to find no node for it", 60)
    assert condition["reason"] == "Unschedulable"
    assert not kube.get("Pod", "big", ns)["spec"].get("nodeName")


def test_a_deployment_over_a_class_quota_counted_with_mapped_pods_is_denied_with_the_arithmetic(
    kube: Kube, mapped_webhook: Mapped, namespace: Callable[..., str]
) -> None:
    ns = namespace(**{LABEL: "audit"})
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": ns},
        "spec": {"hard": {DEVICES: "2"}},
    }
    kube.create(quota)
    kube.wait(
        lambda: kube.get("ResourceQuota", "gpus", ns).get("status", {}).get("hard"),
        "the quota's status (resourcequota controller)",
    )
    kube.create(o.pod("first", ns, _gpus(1)))
    kube.wait(lambda: _scheduled(kube, "first", ns), "the first mapped pod scheduled", 60)

    def used() -> str | None:
        found = kube.get("ResourceQuota", "gpus", ns).get("status", {}).get("used", {})
        return found.get(DEVICES) if found.get(DEVICES) not in (None, "0") else None

    assert kube.wait(used, "the quota to charge the mapped pod's device") == "1"
    with pytest.raises(ApiError) as denied:
        kube.create(o.deployment("trainer", ns, _gpus(1), replicas=2))
    assert denied.value.status == 403
    assert (
        f"Deployment trainer needs 2 replicas x 1 device of {CLASS} = 2 ({GPU}: the scheduler "
        f"serves it from this class); ResourceQuota gpus allows 2 ({DEVICES}), 1 in use"
    ) in denied.value.message
    assert kube.find("Deployment", "trainer", ns) is None
    kube.create(o.deployment("trainer", ns, _gpus(1), replicas=1))  # 1 + 1 fits

    # and is placed: left mid-bind, its pod deleted under the scheduler would keep the device in
    # the scheduler's memory (the claim it writes while binding outlives the pod) for a minute
    # or more, where no later journey can see it
    def placed() -> Obj | None:
        pods = kube.list("Pod", ns, labelSelector="app=trainer")
        return next((p for p in pods if _scheduled(kube, p["metadata"]["name"], ns)), None)

    kube.wait(placed, "the trainer's pod scheduled", 60)


def test_report_says_the_pod_is_served_by_dra_through_the_class_and_no_node_needs_a_plugin(
    control_plane: ControlPlane,
    kube: Kube,
    mapped_webhook: Mapped,
    namespace: Callable[..., str],
) -> None:
    ns = namespace(**{LABEL: "dra-only"})
    kube.create(o.pod("served", ns, _gpus(1)))
    kube.wait(lambda: _scheduled(kube, "served", ns), "the mapped pod scheduled", 60)
    config = str(control_plane.kubeconfig())
    policy = str(mapped_webhook.policy)
    code, out, err, _ = run_report("--kubeconfig", config, "--config", policy, "--output", "json")
    assert code == 0, err
    (row,) = [r for r in orjson.loads(out) if r["namespace"] == ns]
    assert row["mode"] == "dra-only"
    assert row["gpu_pods"] == {"dra-extended-resource": 1}

    code, out, err, _ = run_report("--kubeconfig", config, "--config", policy)
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if line.startswith(f"{GPU}: ")]
    assert line.endswith(
        f"served by DRA through DeviceClass {CLASS} (extendedResourceName); no node needs a "
        "device plugin for it"
    ), line

    code, out, err, _ = run_report("--kubeconfig", config, "--config", policy, "--nodes")
    assert code == 0, err
    assert "no node's device plugin advertises a legacy name" in out
    code, out, err, _ = run_report(
        "--kubeconfig", config, "--config", policy, "--nodes", "--output", "json"
    )
    assert code == 0, err
    assert orjson.loads(out) == []  # no node needs a device plugin


# -- translation that leaves the plain case to the scheduler ---------------------------------


def _mig_template(ns: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-mig", "namespace": ns},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "mig",
                            "exactly": {
                                "deviceClassName": "mig.nvidia.com",
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": 'device.attributes["gpu.nvidia.com"]'
                                            '.profile == "1g.10gb"'
                                        }
                                    }
                                ],
                            },
                        }
                    ]
                }
            }
        },
    }


def _placed(kube: Kube, name: str, ns: str) -> Obj | None:
    found = kube.get("Pod", name, ns)
    return found if found["spec"].get("nodeName") else None


def test_translation_leaves_the_mapped_plain_pod_to_the_scheduler_and_translates_mig_and_shares(
    kube: Kube, leaving_webhook: Mapped, namespace: Callable[..., str]
) -> None:
    ns = namespace(**{LEAVE_LABEL: "translate"})
    answer = kube.create(o.pod("cuda", ns, _gpus(1)))
    assert answer.warnings == [LEFT]
    written = answer.obj
    assert written["spec"]["containers"][0]["resources"]["limits"] == {GPU: "1"}
    assert not written["spec"].get("resourceClaims")
    assert "dra-webhook/translated" not in written["metadata"].get("annotations", {})
    pod = kube.wait(lambda: _scheduled(kube, "cuda", ns), "the left pod scheduled from DRA", 60)
    (mapping,) = pod["status"]["extendedResourceClaimStatus"]["requestMappings"]
    assert (mapping["containerName"], mapping["resourceName"]) == ("cuda", GPU)
    kube.wait(lambda: _special_claim(kube, ns), "the scheduler's claim, allocated")

    # in the same namespace, what the scheduler's own path cannot express is still translated
    mig = o.pod_spec(o.container("slice", limits={"nvidia.com/mig-1g.10gb": "1"}))
    translated = kube.create(o.pod("slice", ns, mig)).obj
    assert translated["spec"]["resourceClaims"][0]["resourceClaimTemplateName"].startswith(
        "dra-mig-nvidia-com-1-"
    )
    assert "limits" not in translated["spec"]["containers"][0]["resources"]
    share = o.pod_spec(o.container("share", limits={GPU: "1", "nvidia.com/gpumem": "4000"}))
    shared = kube.create(o.pod("share", ns, share)).obj
    assert shared["spec"]["resourceClaims"][0]["resourceClaimTemplateName"].startswith(
        "dra-gpu-shared-nvidia-com-1-"
    )
    assert "limits" not in shared["spec"]["containers"][0]["resources"]
    for name in ("slice", "share"):
        kube.wait(
            lambda name=name: _placed(kube, name, ns), f"the translated pod {name} placed", 60
        )


def test_a_judged_pod_with_a_left_name_is_not_refused_by_the_admission_policy(
    kube: Kube, leaving_webhook: Mapped, namespace: Callable[..., str]
) -> None:
    ns = namespace(**{LEAVE_LABEL: "translate"})
    kube.create(_mig_template(ns))
    spec = o.pod_spec(o.container("cuda", limits={GPU: "1"}))
    spec["containers"][0]["resources"]["claims"] = [{"name": "mig"}]
    spec["resourceClaims"] = [{"name": "mig", "resourceClaimTemplateName": "one-mig"}]
    answer = kube.create(o.pod("both", ns, spec))
    assert LEFT in answer.warnings
    stored = answer.obj
    assert stored["metadata"]["annotations"]["dra-webhook/judged-claims"] == "t:one-mig"
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {GPU: "1"}
    pod = kube.wait(lambda: _scheduled(kube, "both", ns), "the pod with both claims scheduled", 60)
    assert pod["status"]["extendedResourceClaimStatus"]["requestMappings"]
    assert pod["spec"]["nodeName"] == "node-a"  # the only node with a 1g.10gb MIG device
