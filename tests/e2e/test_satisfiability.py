"""Journey satisfiability: the webhook's verdict on a claim ("no device in the cluster can satisfy
it", a warning under the default policy) agrees with what the real scheduler does with a pod
that uses the claim: allocate it, or leave the pod unschedulable.

The claims are generated over the fleet (tests/e2e/fleet.py): both DeviceClasses, selectors on
memory capacity, product name, architecture, type and MIG profile, counts from 1 to 5, some
impossible. What each should get is worked out here from the fleet's devices, per node, so each
case knows its class:

- plain: enough matching devices on some node, or too few in the whole cluster;
- per-node: more matching devices in the cluster than the claim needs, but fewer on every single
  node: the scheduler allocates a claim on one node, and so does the webhook's model
  (app/allocation);
- cel-error: a selector that reads an attribute some devices lack. The scheduler aborts the
  claim on the first error (SchedulerError, DESIGN.md), and the model says so.

Every case must agree; a disagreement fails with the claim. The generated differential test
(test_satisfiability_differential.py) covers constraints, taints, MIG counters and many nodes.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e import fleet
from tests.e2e import objects as o
from tests.e2e.kube import Kube, release_devices

pytestmark = [pytest.mark.journey("satisfiability"), pytest.mark.usefixtures("webhook")]

D = fleet.DRIVER
Device = dict[str, Any]
UNITS = {"Gi": 1 << 30, "Mi": 1 << 20}


def _bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(Gi|Mi)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * UNITS[unit]


def _attr(device: Device, name: str) -> Any:
    value = device["attributes"].get(name)
    return None if value is None else next(iter(value.values()))


@dataclass(frozen=True)
class Selector:
    name: str
    cel: str | None
    matches: Callable[[Device], bool]
    errors_on_some: bool = False


def _memory_at_least(q: str) -> Selector:
    return Selector(
        f"memory>={q}",
        f'device.capacity["{D}"].memory.compareTo(quantity("{q}")) >= 0',
        lambda d: _bytes(d["capacity"]["memory"]["value"]) >= _bytes(q),
    )


def _attribute_is(name: str, value: str) -> Selector:
    return Selector(
        f"{name}={value}",
        f'device.attributes["{D}"].{name} == "{value}"',
        lambda d: _attr(d, name) == value,
    )


def _product_starts(prefix: str) -> Selector:
    return Selector(
        f"product={prefix}*",
        f'device.attributes["{D}"].productName.startsWith("{prefix}")',
        lambda d: str(_attr(d, "productName")).startswith(prefix),
    )


ANY = Selector("any", None, lambda d: True)
GPU_SELECTORS = [
    ANY,
    _memory_at_least("40Gi"),
    _memory_at_least("80Gi"),
    _memory_at_least("100Gi"),
    _product_starts("NVIDIA H100"),
    _product_starts("NVIDIA A100"),
    _product_starts("NVIDIA B200"),
    _attribute_is("architecture", "Hopper"),
    _attribute_is("type", "mig"),  # contradicts the class
]
MIG_SELECTORS = [
    ANY,
    _attribute_is("profile", "1g.10gb"),
    _attribute_is("profile", "3g.40gb"),
    _attribute_is("profile", "7g.80gb"),
    _memory_at_least("20Gi"),
]
NVLINK = Selector(
    "nvlinkDomain=0",
    f'device.attributes["{D}"].nvlinkDomain == 0',
    lambda d: _attr(d, "nvlinkDomain") == 0,
    errors_on_some=True,  # only the H100s publish it
)
CLASS_TYPE = {"gpu.nvidia.com": "gpu", "mig.nvidia.com": "mig"}


@dataclass(frozen=True)
class Case:
    device_class: str
    selector: Selector
    count: int

    @property
    def id(self) -> str:
        return f"{self.device_class.split('.')[0]}-{self.selector.name}-x{self.count}"

    def per_node(self) -> dict[str, int]:
        found = {}
        for node in fleet.NODES:
            devices = fleet.resource_slice(node)["spec"]["devices"]
            of_class = [d for d in devices if _attr(d, "type") == CLASS_TYPE[self.device_class]]
            found[node] = sum(1 for d in of_class if self.selector.matches(d))
        return found

    @property
    def scheduler_allocates(self) -> bool:
        if self.selector.errors_on_some:
            return False  # the first device without the attribute aborts the claim
        return max(self.per_node().values()) >= self.count

    @property
    def cluster_has_enough(self) -> bool:
        return sum(self.per_node().values()) >= self.count

    @property
    def gap(self) -> str | None:
        if self.selector.errors_on_some:
            return "cel-error"
        if self.cluster_has_enough and not self.scheduler_allocates:
            return "per-node"
        return None


def _cases() -> Iterator[Case]:
    for selector, count in itertools.product(GPU_SELECTORS, (1, 2, 3)):
        yield Case("gpu.nvidia.com", selector, count)
    yield Case("gpu.nvidia.com", ANY, 5)
    for selector, count in itertools.product(MIG_SELECTORS, (1, 2)):
        yield Case("mig.nvidia.com", selector, count)
    yield Case("mig.nvidia.com", ANY, 3)
    yield Case("gpu.nvidia.com", NVLINK, 1)


CASES = list(_cases())


def _param(case: Case) -> Any:
    return pytest.param(case, id=case.id)


def test_the_cases_cover_thirty_claims_both_verdicts_per_node_and_cel_errors() -> None:
    agreed = [c for c in CASES if c.gap is None]
    assert len(agreed) >= 30
    assert {c.scheduler_allocates for c in agreed} == {True, False}
    assert {c.gap for c in CASES} == {None, "per-node", "cel-error"}


@pytest.fixture(scope="module")
def claims_namespace(kube: Kube) -> Iterator[str]:
    name = kube.namespace("satisfiability", **{"gpu-mode": "dra-only"})
    yield name
    release_devices(kube, name)


UNSATISFIABLE = re.compile(r"^spec\.devices\.requests\[0\]: (asks for|no device in the cluster)")


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_the_webhooks_verdict_matches_the_schedulers(
    case: Case, kube: Kube, claims_namespace: str
) -> None:
    ns, name = claims_namespace, re.sub(r"[^a-z0-9-]", "-", case.id.lower())
    selectors = [case.selector.cel] if case.selector.cel else []
    spec = o.claim_spec(o.exactly(case.device_class, case.count, *selectors))
    answer = kube.create(o.claim(name, ns, spec))
    webhook_satisfiable = not any(UNSATISFIABLE.match(w) for w in answer.warnings)

    pod_spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)), claims=[{"name": "gpu", "resourceClaimName": name}]
    )
    kube.create(o.pod(name, ns, pod_spec))
    try:
        outcome = kube.wait(
            lambda: o.pod_outcome(kube, ns, name), f"the scheduler's verdict on {case.id}", 30
        )
        if outcome == "unschedulable" and webhook_satisfiable:
            # a device freed by the previous case may reach the scheduler a moment late: it
            # retries on claim events, so give it that moment before calling a disagreement
            outcome = o.settle_outcome(kube, ns, name)
    finally:
        kube.delete("Pod", name, ns, now=True)
        kube.delete("ResourceClaim", name, ns)
        kube.wait(lambda: kube.find("ResourceClaim", name, ns) is None, f"claim {name} gone")
    scheduler_allocated = outcome == "allocated"
    assert webhook_satisfiable == scheduler_allocated, (
        f"claim {spec}: webhook says {'satisfiable' if webhook_satisfiable else 'unsatisfiable'} "
        f"(warnings {answer.warnings}), scheduler {outcome}; devices per node {case.per_node()}"
    )
    assert scheduler_allocated == case.scheduler_allocates, "the case's own expectation"


# -- a fabric-level pool: devices reaching the nodes a label selects ---------------------------

FABRIC_DRIVER = "fabric.example.com"
FABRIC_CLASS = "gpu.fabric.example.com"
FABRIC_LABEL = "example.com/fabric"
FABRIC_NODES = {"fabric-h100": "NVIDIA H100 80GB HBM3", "fabric-l4": "NVIDIA L4"}
"""Two node types, each with two GPUs of its own; only fabric-h100 starts on the fabric."""


def _fabric_gpu(name: str, product: str) -> Device:
    return {
        "name": name,
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}},
        "capacity": {"memory": {"value": "80Gi"}},
    }


def _fabric_slice(name: str, devices: list[Device], **selection: Any) -> Any:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": FABRIC_DRIVER,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
            **selection,
        },
    }


@pytest.fixture(scope="module")
def fabric(kube: Kube) -> Iterator[str]:
    """The two nodes, their GPUs, and a fabric-attached pool (a ResourceSlice whose
    nodeSelector picks the nodes labelled example.com/fabric=ib-0): two GB200s. Yields the
    namespace the claims go to."""
    for name, product in FABRIC_NODES.items():
        labels = {"kubernetes.io/hostname": name, "example.com/node-type": product.split()[1]}
        if name == "fabric-h100":
            labels[FABRIC_LABEL] = "ib-0"
        kube.apply(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        )
        kube.patch("Node", name, None, {"spec": {"taints": None}})
        kube.patch("Node", name, None, fleet._STATUS, subresource="status")
        gpus = [_fabric_gpu(f"gpu-{i}", product) for i in range(2)]
        kube.apply(_fabric_slice(name, gpus, nodeName=name))
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": FABRIC_LABEL, "operator": "In", "values": ["ib-0"]}]}]}  # fmt: skip
    fabric_gpus = [_fabric_gpu(f"gb200-{i}", "NVIDIA GB200") for i in range(2)]
    kube.apply(_fabric_slice("fabric-ib-0", fabric_gpus, nodeSelector=selector))
    kube.apply(o.typed_device_class(FABRIC_CLASS, FABRIC_DRIVER, "gpu"))
    name = kube.namespace("satisfiability-fabric", **{"gpu-mode": "dra-only"})
    yield name
    release_devices(kube, name)
    for slice_name in (*FABRIC_NODES, "fabric-ib-0"):
        kube.delete("ResourceSlice", slice_name)
    kube.delete("DeviceClass", FABRIC_CLASS)
    for node_name in FABRIC_NODES:
        kube.delete("Node", node_name)


def _product(prefix: str) -> str:
    return f'device.attributes["{FABRIC_DRIVER}"].productName.startsWith("{prefix}")'


PAIR = {
    "devices": {
        "requests": [
            {"name": "fabric", "exactly": o.exactly(FABRIC_CLASS, 1, _product("NVIDIA GB200"))},
            {"name": "l4", "exactly": o.exactly(FABRIC_CLASS, 1, _product("NVIDIA L4"))},
        ]
    }
}
"""A fabric-attached GPU and an L4, which only the fabric-l4 node has: one pod, one node."""
NEVER_WARNING = re.compile(r"^spec(\.devices\.(requests|constraints)\[\d+\])?: (?!not now:)")


def _verdict(kube: Kube, ns: str) -> list[str]:
    return [
        w
        for w in kube.create(o.claim("probe", ns, PAIR), dry_run=True).warnings
        if NEVER_WARNING.match(w)
    ]


def _run(kube: Kube, ns: str, name: str) -> tuple[list[str], str, Any]:
    """The webhook's "never" warnings on the pair, what the scheduler does with a pod using it,
    and the claim as allocated (or not); both are deleted before returning."""
    answer = kube.create(o.claim(name, ns, PAIR))
    pod_spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)), claims=[{"name": "gpu", "resourceClaimName": name}]
    )
    kube.create(o.pod(name, ns, pod_spec))
    try:
        outcome = kube.wait(lambda: o.pod_outcome(kube, ns, name), f"the verdict on {name}", 30)
        claim = kube.get("ResourceClaim", name, ns)
        placed = kube.get("Pod", namespace=ns, name=name)["spec"].get("nodeName")
    finally:
        kube.delete("Pod", name, ns, now=True)
        kube.delete("ResourceClaim", name, ns)
        kube.wait(lambda: kube.find("ResourceClaim", name, ns) is None, f"claim {name} gone")
    never = [w for w in answer.warnings if NEVER_WARNING.match(w)]
    return never, outcome, (placed, o.allocated_devices(claim))


def test_a_fabric_gpu_and_a_gpu_only_another_node_type_has_is_never_until_one_node_has_both(
    kube: Kube, fabric: str, webhook: Any
) -> None:
    _, metrics = webhook.get("/metrics")
    assert "dra_webhook_node_labels_available 1.0" in metrics  # the chart's role grants nodes
    kube.wait(lambda: _verdict(kube, fabric), "the webhook to see the fabric", 30)

    never, outcome, _ = _run(kube, fabric, "pair-apart")
    assert never, "the webhook must warn: no node has both a fabric GPU and an L4"
    assert outcome == "unschedulable"  # and the scheduler leaves the pod Pending

    kube.patch("Node", "fabric-l4", None, {"metadata": {"labels": {FABRIC_LABEL: "ib-0"}}})
    kube.wait(lambda: not _verdict(kube, fabric), "the webhook to see the new label", 30)
    never, outcome, (node, devices) = _run(kube, fabric, "pair-together")
    assert never == []
    if outcome != "allocated":
        outcome = o.settle_outcome(kube, fabric, "pair-together")
    assert outcome == "allocated"
    assert node == "fabric-l4"
    assert len(devices) == 2
