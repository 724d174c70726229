"""Journey device-taints: what a DeviceTaintRule would evict, said before the API server stores
it, and refused to whoever the policy does not trust (policy deviceTaints, tests/e2e/values.yaml:
e2e-admin may write any rule, anyone else may evict no pod; docs/operations.md).

A node of its own (`node-taints`, driver `gpu.taints.example.com`, four devices) and pods in two
namespaces holding them through claims the scheduler allocated. Then:

- a tenant (user `tenant-ops`, impersonated, whom a ClusterRole lets create DeviceTaintRules)
  writing a rule with an empty selector and NoExecute is refused, the denial naming the count
  and the policy;
- the admin writing the same rule (server-side dry run: stored, it would evict every DRA pod of
  the control plane) is warned with the count, the same count the API server's claims give;
- a rule naming one device names its one pod, and the device-taint eviction controller then
  deletes exactly that pod;
- a rule with effect None says what NoExecute would evict, and the controller's own simulation in
  the rule's status (`EvictionInProgress`, reason NoEffect) gives the same numbers.

Kubernetes 1.36 serves DeviceTaintRule in resource.k8s.io/v1beta2 (on here) and acts on rules
with DRADeviceTaintRules, which tests/e2e/controlplane.py OPT_IN turns on for this journey; 1.37
serves v1 and acts by default. 1.34 and 1.35 act only with DRADeviceTaints, an alpha gate that
also makes the API server keep claims' tolerations, which the releases journey shows dropped
there: turning it on would change what that journey pins, so this journey starts at 1.36.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e import objects as o
from tests.e2e.controlplane import EVICTION_CONTROLLER, ControlPlane
from tests.e2e.fleet import _STATUS, node
from tests.e2e.kube import Answer, ApiError, Kube, release_devices

pytestmark = [
    pytest.mark.journey("device-taints"),
    pytest.mark.since(
        36,
        "DeviceTaintRules act only with DRADeviceTaints, an alpha gate that also changes which "
        "claim fields the API server keeps (pinned by the releases journey)",
    ),
    pytest.mark.usefixtures("webhook"),
]

Obj = dict[str, Any]
DRIVER = "gpu.taints.example.com"
NODE = "node-taints"
CLASS = "taints.example.com"
TENANT = "tenant-ops"
RULES = "/apis/resource.k8s.io/{version}/devicetaintrules"
EVICTING = re.compile(r"would evict (\d+) pods? in (\d+) namespaces?")


def _version(kube: Kube) -> str:
    """The newest resource.k8s.io version that serves DeviceTaintRule here."""
    for version in ("v1", "v1beta2", "v1alpha3"):
        found = kube.http.get(f"/apis/resource.k8s.io/{version}")
        if found.status_code == 200 and any(
            r["name"] == "devicetaintrules" for r in found.json().get("resources", [])
        ):
            return version
    pytest.fail("no resource.k8s.io version serves DeviceTaintRule")


def _rule(version: str, name: str, selector: Obj | None, effect: str) -> Obj:
    spec: Obj = {"taint": {"key": "example.com/maintenance", "value": "drain", "effect": effect}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def _create(kube: Kube, rule: Obj, *, as_user: str | None = None, dry_run: bool = False) -> Answer:
    version = rule["apiVersion"].rsplit("/", 1)[1]
    headers = {"Impersonate-User": as_user, "Impersonate-Group": "system:authenticated"}
    return kube._send(  # (the raw client's request: the path depends on the release)
        "POST",
        RULES.format(version=version),
        json=rule,
        params={"dryRun": "All"} if dry_run else {},
        headers=headers if as_user else {},
    )


@pytest.fixture(scope="module")
def eviction(control_plane: ControlPlane) -> Iterator[None]:
    """The device-taint eviction controller, for this journey only (controlplane.py says why
    the session's controller-manager does not run it)."""
    control_plane.start_controllers("eviction-controller", (EVICTION_CONTROLLER,))
    yield
    control_plane.stop_process("eviction-controller")


@pytest.fixture(scope="module")
def devices(kube: Kube, eviction: None) -> Iterator[None]:
    """node-taints, Ready, with four devices of its own driver, and their DeviceClass; a
    ClusterRole that lets the tenant create DeviceTaintRules (and only that)."""
    kube.apply(node(NODE))
    kube.patch("Node", NODE, None, {"spec": {"taints": None}})
    kube.patch("Node", NODE, None, _STATUS, subresource="status")
    kube.apply(o.typed_device_class(CLASS, DRIVER, "gpu"))
    kube.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": NODE,
                "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"dev-{i}", "attributes": {"type": {"string": "gpu"}}}
                    for i in range(4)
                ],
            },
        }
    )
    rbac = "rbac.authorization.k8s.io/v1"
    kube.apply(
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": "e2e-taint-writer"},
            "rules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["devicetaintrules"],
                    "verbs": ["create"],
                }
            ],
        }
    )
    kube.apply(
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "e2e-taint-writer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "e2e-taint-writer"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}],
        }
    )  # fmt: skip
    yield
    kube.delete("ResourceSlice", f"{NODE}-{DRIVER}")


def _pod_on_device(kube: Kube, namespace: str, name: str) -> tuple[str, str]:
    """A pod with one device of node-taints (a claim from a template), once allocated: the
    (pool, device) it holds."""
    spec = o.pod_spec(
        o.container(claims=("dev",)), claims=[{"name": "dev", "resourceClaimTemplateName": "one"}]
    )
    spec["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    kube.create(o.pod(name, namespace, spec))
    o.scheduled(kube, namespace, name)
    (claim,) = o.allocated_claims(kube, namespace, name).values()
    ((_, pool, device),) = o.allocated_devices(claim)
    return pool, device


@pytest.fixture(scope="module")
def pods(kube: Kube, devices: None) -> Iterator[dict[str, tuple[str, str, str]]]:
    """Three pods: two in one namespace, one in another -> (namespace, pool, device)."""
    names: list[str] = []
    held: dict[str, tuple[str, str, str]] = {}
    for ns, pod_names in (("taints-ml-a", ("train-0", "train-1")), ("taints-ml-b", ("serve-0",))):
        kube.namespace(ns)
        names.append(ns)
        kube.create(o.claim_template("one", ns, o.claim_spec(o.exactly(CLASS))))
        for pod_name in pod_names:
            held[pod_name] = (ns, *_pod_on_device(kube, ns, pod_name))
    yield held
    for ns in names:
        release_devices(kube, ns)


def _evictable_pods(kube: Kube) -> tuple[int, int]:
    """(pods, namespaces) an empty-selector NoExecute rule evicts, from the API server's claims:
    the pods in reservedFor of every allocated claim holding a device without a NoExecute
    toleration of the taint."""
    pods: set[tuple[str, str]] = set()
    for claim in kube.list("ResourceClaim"):
        results = (claim.get("status", {}).get("allocation") or {}).get("devices", {})
        tolerated = all(
            any(t.get("effect") == "NoExecute" and "tolerationSeconds" not in t
                for t in r.get("tolerations", []))
            for r in results.get("results", [])
        )  # fmt: skip
        if not results.get("results") or tolerated:
            continue
        for consumer in claim["status"].get("reservedFor", []):
            if consumer.get("resource") == "pods":
                pods.add((claim["metadata"]["namespace"], consumer["name"]))
    return len(pods), len({ns for ns, _ in pods})


def _eventually(kube: Kube, attempt: Callable[[], Any], what: str) -> Any:
    """The webhook's view follows the API server within a moment: ask until it has."""
    return kube.wait(attempt, what, timeout=30)


def test_an_empty_no_execute_rule_is_refused_for_a_tenant_naming_the_count_and_the_policy(
    kube: Kube, pods: dict[str, tuple[str, str, str]]
) -> None:
    rule = _rule(_version(kube), "tenant-drain-all", {}, "NoExecute")

    def refused() -> str | None:
        try:
            _create(kube, rule, as_user=TENANT)
        except ApiError as error:
            match = EVICTING.search(error.message)
            return error.message if match and int(match.group(1)) >= len(pods) else None
        pytest.fail("a tenant's rule evicting every DRA pod was stored")

    message = _eventually(kube, refused, "the webhook to see the journey's pods")
    assert f"user {TENANT} may not write this rule" in message
    assert "policy deviceTaints" in message
    assert "spec.taint.effect: NoExecute would evict" in message
    assert "deviceTaints.maxEvictedPods" in message
    assert "taints-ml-a (2" in message and "taints-ml-b (1" in message
    assert "ask the platform team for a maintenance window" in message
    assert not kube.http.get(RULES.format(version=_version(kube)) + "/tenant-drain-all").is_success


def test_the_same_rule_by_the_admin_is_warned_with_the_count_the_api_server_gives(
    kube: Kube, pods: dict[str, tuple[str, str, str]]
) -> None:
    rule = _rule(_version(kube), "admin-drain-all", {}, "NoExecute")
    expected = _evictable_pods(kube)

    def warned() -> str | None:
        answer = _create(kube, rule, dry_run=True)  # stored, it would evict every DRA pod
        said = [w for w in answer.warnings if EVICTING.search(w)]
        match = EVICTING.search(said[0]) if said else None
        return said[0] if match and tuple(map(int, match.groups())) == expected else None

    warning = _eventually(kube, warned, f"a warning naming {expected} pods and namespaces")
    assert warning.startswith("DeviceTaintRule admin-drain-all would evict")
    assert "every device in the cluster" in warning


def test_a_rule_naming_one_device_names_its_one_pod_which_the_controller_then_evicts(
    kube: Kube, pods: dict[str, tuple[str, str, str]]
) -> None:
    namespace, pool, device = pods["serve-0"]
    version = _version(kube)
    rule = _rule(version, "drain-one", {"driver": DRIVER, "pool": pool, "device": device},
                 "NoExecute")  # fmt: skip
    answer = _create(kube, rule)
    try:
        assert answer.warnings[0] == (
            f"DeviceTaintRule drain-one would evict 1 pod in 1 namespace: {namespace} "
            f"(1: serve-0) (1 device in 1 pool selected)"
        )
        kube.wait(
            lambda: kube.find("Pod", "serve-0", namespace) is None or None,
            "the eviction controller to delete pod serve-0",
            timeout=60,
        )
        for name, (ns, _, _) in pods.items():
            if name != "serve-0":
                assert kube.find("Pod", name, ns) is not None, f"{ns}/{name} was evicted too"
    finally:
        kube.http.delete(RULES.format(version=version) + "/drain-one")


def test_a_none_rule_says_what_no_execute_would_evict_as_the_controller_s_simulation_does(
    kube: Kube, pods: dict[str, tuple[str, str, str]]
) -> None:
    _, pool, _ = pods["train-0"]
    version = _version(kube)
    rule = _rule(version, "look-first", {"driver": DRIVER, "pool": pool}, "None")
    answer = _create(kube, rule)
    try:
        (said,) = [w for w in answer.warnings if "as NoExecute it would evict" in w]
        match = EVICTING.search(said)
        assert match is not None
        ours = tuple(map(int, match.groups()))
        assert ours == (2, 1)  # train-0 and train-1 (serve-0 was evicted above)

        def simulated() -> tuple[int, int] | None:
            found = kube.http.get(RULES.format(version=version) + "/look-first").json()
            for condition in found.get("status", {}).get("conditions", []):
                counted = re.search(
                    r"(\d+) pods? would be evicted in (\d+) (?:different )?namespaces?",
                    condition.get("message", ""),
                )
                if condition.get("reason") == "NoEffect" and counted:
                    return (int(counted.group(1)), int(counted.group(2)))
            return None

        assert _eventually(kube, simulated, "the controller's simulation in the status") == ours
    finally:
        kube.http.delete(RULES.format(version=version) + "/look-first")
