"""Journey preemption: what moving to DRA takes away, shown on the real scheduler.

A Node `node-p` advertises two device-plugin GPUs (`nvidia.com/gpu: 2` in its status capacity
and allocatable, as the NVIDIA device plugin would report them; no kubelet runs). Two
PriorityClasses: training at 100, inference at 100000, both PreemptLowerPriority.

- The Priority admission plugin runs before the mutating webhooks: a throwaway capture webhook
  registered beside ours sees `spec.priority` and `spec.preemptionPolicy` already set on a pod
  that names only its class (app.k8s.priority reads a Pod's own fields for that reason).
- Device plugin: two training pods fill node-p; the pod of an inference Deployment asking
  `nvidia.com/gpu: 1` is nominated to node-p (`status.nominatedNodeName`), one training pod
  gets a deletionTimestamp and a `DisruptionTarget` condition (reason `PreemptionByScheduler`),
  and once it is gone the inference pod is bound there. In an audit namespace the webhook
  warned on the Deployment's create that this is what DRA will not do (bare pods there are
  judged by the chart's ValidatingAdmissionPolicy, which never calls the webhook).
- DRA: the same pods in a translate namespace, translated to claims. Four training pods take
  the fleet's four whole GPUs; the inference pod's create comes back with the two sentences
  (what translation takes away, and "not now: DRA will not preempt the lower-priority pods
  holding the devices"), and then it stays Pending: Unschedulable, never nominated, no training
  pod touched.

- The admission policy: a bare pod that may preempt, in a dra-only namespace, is denied with its
  offences and the same sentence ("through DRA claims (the fix) it will not"); in an audit one
  warned with it ("under dra-only"); a pod whose class says Never hears only its offences.
- `report` with the chart's report role (which lists priorityclasses): the inference Deployment
  is named with its class, priority and pods, "relies on preemption, which DRA does not do", in
  the text, the JSON and (with the PolicyReport CRD of DRA_WEBHOOK_TEST_DATA) a PolicyReport
  result of rule relies-on-preemption.

No release in the matrix preempts for DRA (app.cluster.release.PREEMPTS_FOR_DRA): run on 1.34,
1.36.5 and 1.37.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
import yaml

from tests.assets import third_party
from tests.e2e import objects as o
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import ApiError, Kube
from tests.e2e.webhook import Webhook, render, token_kubeconfig
from tests.report.peak import run_report

pytestmark = [pytest.mark.journey("preemption"), pytest.mark.usefixtures("webhook")]

Obj = dict[str, Any]
LOW, HIGH, POLITE = "e2e-training-low", "e2e-inference-high", "e2e-polite"
NODE = "node-p"
GPU = "nvidia.com/gpu"
LOSES = "may evict lower-priority pods for nvidia.com/gpu today"
NOT_NOW = "not now: DRA will not preempt the lower-priority pods holding the devices:"
RELIES = "relies on preemption, which DRA does not do"
EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"


def _priority_class(name: str, value: int, policy: str = "PreemptLowerPriority") -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "preemptionPolicy": policy,
    }


@pytest.fixture(scope="module")
def classes(kube: Kube) -> Iterator[None]:
    kube.apply(_priority_class(LOW, 100))
    kube.apply(_priority_class(HIGH, 100_000))
    kube.apply(_priority_class(POLITE, 100_000, "Never"))
    yield
    for name in (LOW, HIGH, POLITE):
        kube.delete("PriorityClass", name)


@pytest.fixture(scope="module")
def plugin_node(kube: Kube) -> Iterator[str]:
    """node-p, Ready, with two device-plugin GPUs and no DRA devices."""
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
        }
    )
    kube.patch("Node", NODE, None, {"spec": {"taints": None}})
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: "2"}
    status = {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }
    kube.patch("Node", NODE, None, {"status": status}, subresource="status")
    yield NODE
    kube.delete("Node", NODE)


def _gpu_pod(name: str, namespace: str, priority_class: str, *, on: str | None = None) -> Obj:
    spec = o.pod_spec(o.container(limits={GPU: "1"}))
    spec["priorityClassName"] = priority_class
    spec["terminationGracePeriodSeconds"] = 30  # a victim shows its deletionTimestamp
    if on is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": on}
    return o.pod(name, namespace, spec)


def _condition(pod: Obj, kind: str) -> Obj | None:
    return next((c for c in pod.get("status", {}).get("conditions", []) if c["type"] == kind), None)


# -- what the webhook sees ---------------------------------------------------------------------


class _Capture(BaseHTTPRequestHandler):
    seen: ClassVar[list[Obj]] = []

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        self.seen.append(review["request"].get("object") or {})
        body = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": True},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.mark.usefixtures("classes")
def test_a_pod_reaches_the_mutating_webhooks_with_its_priority_already_set(
    kube: Kube, webhook: Webhook, namespace: Any
) -> None:
    ns = namespace("audit", **{"e2e-capture": "on"})
    certs = webhook.server.cert_dir
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "e2e-preemption-capture"},
        "webhooks": [
            {
                "name": "capture.e2e.example.com",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{server.server_address[1]}/capture",
                    "caBundle": base64.b64encode((certs / "ca.crt").read_bytes()).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"e2e-capture": "on"}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Ignore",
                "timeoutSeconds": 5,
            }
        ],
    }
    kube.apply(configuration)
    try:
        pod = _gpu_pod("inference", ns, HIGH)
        assert "priority" not in pod["spec"] and "preemptionPolicy" not in pod["spec"]

        def captured() -> Obj | None:
            kube.create(pod, dry_run=True)
            return _Capture.seen[-1] if _Capture.seen else None

        seen = kube.wait(captured, "the capture webhook to be called")
    finally:
        kube.delete("MutatingWebhookConfiguration", "e2e-preemption-capture")
        server.shutdown()
        server.server_close()
    assert seen["spec"]["priorityClassName"] == HIGH
    assert seen["spec"]["priority"] == 100_000
    assert seen["spec"]["preemptionPolicy"] == "PreemptLowerPriority"


# -- device plugin: preempted ------------------------------------------------------------------


@pytest.mark.usefixtures("classes")
def test_on_device_plugin_gpus_the_scheduler_preempts_the_lower_priority_pod(
    kube: Kube, plugin_node: str, namespace: Any
) -> None:
    ns = namespace("audit")
    for i in range(2):
        kube.create(_gpu_pod(f"train-{i}", ns, LOW, on=plugin_node))
    for i in range(2):
        assert o.scheduled(kube, ns, f"train-{i}")["spec"]["nodeName"] == plugin_node

    # pods in audit namespaces are judged by the chart's admission policy; their workloads by
    # the webhook, which says on create what moving them to DRA would take away
    inference = _gpu_pod("inference", ns, HIGH, on=plugin_node)
    answer = kube.create(o.deployment("inference", ns, inference["spec"]))
    (loses,) = [w for w in answer.warnings if LOSES in w]
    assert loses.startswith(
        "spec.template.spec: the pods of Deployment inference (priority 100000, class "
        "e2e-inference-high) may evict"
    )
    assert "under dra-only it will not" in loses

    def nominated() -> Obj | None:
        pods = kube.list("Pod", ns, labelSelector="app=inference")
        return next((p for p in pods if p["status"].get("nominatedNodeName")), None)

    preemptor = kube.wait(nominated, "the inference pod to be nominated")
    assert preemptor["status"]["nominatedNodeName"] == plugin_node

    def victim() -> Obj | None:
        for i in range(2):
            found = kube.find("Pod", f"train-{i}", ns)
            if found is None or found["metadata"].get("deletionTimestamp"):
                return found or {"metadata": {"name": f"train-{i}"}}
        return None

    evicted = kube.wait(victim, "a training pod to be preempted")
    name = evicted["metadata"]["name"]
    target = _condition(evicted, "DisruptionTarget")
    if target is not None:  # (absent only when the pod went at once)
        assert target["reason"] == "PreemptionByScheduler"
    kube.delete("Pod", name, ns, now=True)  # what the kubelet would confirm
    bound = o.scheduled(kube, ns, preemptor["metadata"]["name"])
    assert bound["spec"]["nodeName"] == plugin_node


# -- DRA: not preempted ------------------------------------------------------------------------


def _asks_for_devices(spec: Obj) -> bool:
    """Claims, or an extended resource a DeviceClass may serve (`extendedResourceName`: the
    scheduler allocates a device for it and writes the claim only when it binds)."""
    if spec.get("resourceClaims"):
        return True
    containers = [*spec.get("containers", []), *spec.get("initContainers", [])]
    return any(
        "/" in name and not name.startswith("kubernetes.io/")
        for c in containers
        for field in ("requests", "limits")
        for name in c.get("resources", {}).get(field, {})
    )


def _fleet_free(kube: Kube, timeout: float = 120) -> None:
    """Wait until no claim anywhere holds a device, no claim the scheduler writes while it binds
    a pod (`resource.kubernetes.io/extended-resource-claim`, not yet allocated) is left, and no
    pod of another test waits for the scheduler with claims or an extended resource: the test
    needs all four of the fleet's GPUs. A namespace an earlier journey left can still hold some
    (its claims go in their own time), and a pod the scheduler is still placing takes a device in
    memory for as long as it tries: when that pod is then gone, no API object changes, so a pod
    of this test found unschedulable meanwhile is not tried again for minutes. (A pod deleted
    while the scheduler binds it can keep its device there with nothing left to see: journeys
    wait for what they create to be placed.) Fails naming the holders."""
    held: list[str] = []

    def free() -> bool:
        held[:] = [
            f"claim {c['metadata']['namespace']}/{c['metadata']['name']}"
            for c in kube.list("ResourceClaim", None)
            if o.allocated_devices(c) or EXTENDED_CLAIM in c["metadata"].get("annotations", {})
        ]
        held.extend(
            f"pod {p['metadata']['namespace']}/{p['metadata']['name']} (unscheduled)"
            for p in kube.list("Pod", None)
            if _asks_for_devices(p["spec"])
            and p["spec"].get("schedulerName", "default-scheduler") == "default-scheduler"
            and not p["spec"].get("nodeName")
            and not p["spec"].get("schedulingGates")
        )
        return not held

    try:
        kube.wait(free, "every claim of the cluster to let go of its devices", timeout)
    except AssertionError as error:
        raise AssertionError(f"{error}; still holding or placing: {', '.join(held[:10])}") from None


def _allocated(kube: Kube, namespace: str, name: str) -> None:
    """`o.allocated_claims`, failing with what the scheduler said of the pod and what holds
    devices in the whole cluster."""
    try:
        o.allocated_claims(kube, namespace, name, timeout=60)
    except AssertionError as error:
        pod = kube.get("Pod", name, namespace)
        said = _condition(pod, "PodScheduled") or {}
        holders = [
            f"{c['metadata']['namespace']}/{c['metadata']['name']}"
            for c in kube.list("ResourceClaim", None)
            if o.allocated_devices(c)
        ]
        raise AssertionError(
            f"{error}; PodScheduled: {said.get('reason')}: {said.get('message')}; "
            f"claims holding devices: {', '.join(holders)}"
        ) from None


@pytest.mark.usefixtures("classes", "plugin_node")
def test_on_dra_claims_the_scheduler_does_not_preempt_and_the_webhook_said_so(
    kube: Kube, namespace: Any, webhook: Webhook
) -> None:
    ns = namespace("translate")
    _fleet_free(kube)
    for i in range(4):  # the fleet's four whole GPUs
        answer = kube.create(_gpu_pod(f"train-{i}", ns, LOW))
        assert answer.obj["spec"]["resourceClaims"], "translated to a claim"
    for i in range(4):
        _allocated(kube, ns, f"train-{i}")

    inference = _gpu_pod("inference", ns, HIGH)

    def holders_known() -> list[str] | None:
        # the webhook's view has the allocations and their pods once its watches deliver them
        said = kube.create(inference, dry_run=True).warnings
        return said if any(NOT_NOW in w for w in said) else None

    kube.wait(holders_known, "the webhook to know who holds the GPUs")
    warnings = kube.create(inference).warnings
    (loses,) = [w for w in warnings if LOSES in w]
    assert loses.startswith(
        "spec: Pod inference (priority 100000, class e2e-inference-high) may evict"
    )
    assert "translated to DRA it will not" in loses
    (held,) = [w for w in warnings if NOT_NOW in w]
    assert f"{ns}/train-" in held and "(100)" in held

    pending = kube.wait(
        lambda: (p := kube.get("Pod", "inference", ns)) and o.unschedulable(p) and p,
        "the inference pod to be found unschedulable",
    )
    time.sleep(5)  # the scheduler's PostFilter (preemption) ran at that failure; give it time
    pending = kube.get("Pod", "inference", ns)
    assert not pending["spec"].get("nodeName")
    assert not pending["status"].get("nominatedNodeName")
    assert (o.unschedulable(pending) or "").startswith("Unschedulable")
    for i in range(4):
        train = kube.get("Pod", f"train-{i}", ns)
        assert not train["metadata"].get("deletionTimestamp")
        assert _condition(train, "DisruptionTarget") is None

    # the webhook's view holds the bound pods that hold claims, never a pending one: the
    # inference pod (claims, no node) is not even sent to it
    def bound_holders() -> int:
        return sum(
            1
            for p in kube.list("Pod", None)
            if p["spec"].get("nodeName")
            and p["spec"].get("resourceClaims")
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        )

    kube.wait(
        lambda: webhook.metric("dra_webhook_cluster_objects", kind="Pod") == bound_holders(),
        "the webhook's view to hold the bound claim holders only",
    )
    assert bound_holders() >= 4


# -- the admission policy: bare pods in dra-only and audit namespaces --------------------------


@pytest.mark.usefixtures("classes")
def test_the_admission_policy_tells_a_bare_pod_that_may_preempt_what_dra_takes_away(
    kube: Kube, namespace: Any
) -> None:
    sentence = (
        "spec: Pod inference (priority 100000, class e2e-inference-high) may evict "
        "lower-priority pods for these GPUs today; {how} it will not: this cluster's Kubernetes "
        "does not preempt for DRA devices, it waits until one frees up"
    )
    dra_only, audit = namespace("dra-only"), namespace("audit")
    with pytest.raises(ApiError) as denied:
        kube.create(_gpu_pod("inference", dra_only, HIGH))
    assert "ValidatingAdmissionPolicy" in denied.value.message  # the API server's own verdict
    assert "container app asks for nvidia.com/gpu: 1" in denied.value.message
    assert denied.value.message.endswith(sentence.format(how="through DRA claims (the fix)"))

    answer = kube.create(_gpu_pod("inference", audit, HIGH), dry_run=True)
    (warned,) = [w for w in answer.warnings if "may evict" in w]
    assert warned.endswith(sentence.format(how="under dra-only"))

    with pytest.raises(ApiError) as polite:
        kube.create(_gpu_pod("polite", dra_only, POLITE))
    assert "asks for nvidia.com/gpu" in polite.value.message
    assert "may evict" not in polite.value.message


# -- report: the workloads that rely on preemption ---------------------------------------------


@pytest.mark.usefixtures("classes")
def test_report_names_the_gpu_workloads_that_rely_on_preemption(
    control_plane: ControlPlane, kube: Kube, namespace: Any, helm: str, tmp_path: Path
) -> None:
    ns = namespace("audit")
    for name, priority_class in (("inference", HIGH), ("polite", POLITE)):
        spec = _gpu_pod(name, ns, priority_class)["spec"]
        spec["schedulerName"] = "no-such-scheduler"  # pending for good: no node is touched
        kube.create(o.deployment(name, ns, spec, replicas=2))

    # the chart's report role, which grants list on priorityclasses
    docs = render(helm, "--show-only=templates/report.yaml", "--set=report.enabled=true")
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    granted = token_kubeconfig(control_plane, kube, binding["subjects"][0]["name"], tmp_path)
    for doc in (role, binding):
        kube.apply(doc)
    args = ("--kubeconfig", str(granted))

    def listed() -> tuple[int, str, str, int] | None:
        ran = run_report(*args, "--output", "json")
        return ran if ran[0] == 0 else None  # (until the binding takes effect)

    code, out, err, _ = kube.wait(listed, "the report to run under the chart's role")
    assert "PriorityClasses not read" not in err
    row = next(r for r in orjson.loads(out) if r["namespace"] == ns)
    assert row["preempting"] == [
        {
            "workload": "Deployment/inference",
            "priority_class": HIGH,
            "priority": 100_000,
            "pods": 2,
            "per_node": False,
            "resources": [GPU],
        }
    ]
    code, out, err, _ = run_report(*args)
    assert code == 0, err
    assert (
        "  preemption: Deployment/inference: 2 pods at priority 100000 (class "
        f"e2e-inference-high) may evict lower-priority pods for nvidia.com/gpu today: {RELIES}"
    ) in out.splitlines()

    crd = third_party("crds") / "wgpolicyk8s.io_policyreports.yaml"
    kube.install_crd(yaml.safe_load(crd.read_text()))
    code, _, err, _ = run_report(*args, "--policy-reports")
    assert code == 0, err
    answer = kube.http.get(f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/{ns}/policyreports")
    (report,) = answer.json()["items"]
    (result,) = [r for r in report["results"] if r["rule"] == "relies-on-preemption"]
    assert result["resources"][0]["name"] == "inference" and result["result"] == "warn"
    assert RELIES in result["message"]
    assert result["properties"]["priorityClass"] == HIGH
    assert report["metadata"]["annotations"]["dra-webhook/preempting-workloads"] == "1"
