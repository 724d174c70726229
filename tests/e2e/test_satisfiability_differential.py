"""The differential test: generated claims over a generated fleet, the webhook's verdict against
what the real kube-scheduler does with each claim.

The fleet and the claims come from tests/e2e/generated.py and one seed: fixed under `CI=true`
(so CI is repeatable), random otherwise (so `make e2e` keeps finding new cases); the seed is
printed at the start, and `DRA_E2E_SEED=<n>` replays a run. Each claim is created through the
webhook (its warnings are the verdict), then used by one pod, the only pod holding devices of
the fleet; the scheduler either allocates it or marks the pod unschedulable (Unschedulable, or
SchedulerError on a CEL runtime error); then both are deleted so the next claim finds every
device free.

- "never" must mean the scheduler allocates nothing;
- "ok" must mean it allocates;
- "not now" cannot arise with nothing else allocated, except for a moment while the webhook's
  view still holds the previous claim: such claims are not compared (and are counted).

Every disagreement is listed with its claim, the webhook's warnings and the fleet; none may
remain.
"""

from __future__ import annotations

import os
import random
import re
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.assets import control_plane_release
from tests.e2e import generated
from tests.e2e import objects as o
from tests.e2e.fleet import _STATUS, node
from tests.e2e.kube import Kube, release_devices

pytestmark = [pytest.mark.journey("satisfiability"), pytest.mark.usefixtures("webhook")]

CLAIMS = 160
CI_SEED = 20261124


def _seed() -> int:
    if os.environ.get("DRA_E2E_SEED"):
        return int(os.environ["DRA_E2E_SEED"])
    if os.environ.get("CI", "").lower() == "true":
        return CI_SEED
    return random.SystemRandom().randrange(1 << 32)


SEED = _seed()
NEVER = re.compile(r"^spec(\.devices\.(requests|constraints)\[\d+\])?: (?!not now:|not enforced:)")
NOT_NOW = re.compile(r"^spec[^ ]*: not now:")


def _per_device_selection() -> bool:
    """`perDeviceNodeSelection` is kept from 1.36 (DRAPartitionableDevices)."""
    return control_plane_release()[0] >= 36


def _distinct() -> bool:
    """Whether the API server takes a distinctAttribute constraint: 1.34 stores it (its drop of
    the field clears a copy; the scheduler then checks presence only, which the model knows),
    1.35 drops it and refuses the constraint left empty, 1.36 on serves it."""
    return control_plane_release()[0] != 35


def verdict(warnings: list[str]) -> str:
    if any(NEVER.match(w) for w in warnings):
        return "never"
    if any(NOT_NOW.match(w) for w in warnings):
        return "not now"
    return "ok"


def test_claims_cover_every_feature_the_scheduler_checks() -> None:
    rng = random.Random(SEED)
    fleet = generated.fleet(rng)
    specs = [generated.claim_spec(rng) for _ in range(CLAIMS)]
    racked = [s for s in fleet.slices if "nodeName" not in s["spec"]]
    assert len(racked) == 2 * generated.RACKS  # rack-level pools over labelled Nodes
    assert sum(1 for labels in fleet.labels.values() if labels) >= generated.RACKS
    text = repr(specs)
    for feature in ("firstAvailable", "matchAttribute", "distinctAttribute", "tolerations"):
        assert feature in text, feature
    assert "'All'" in text
    assert len(specs) >= 150


@pytest.fixture(scope="module")
def generated_fleet(kube: Kube, request: pytest.FixtureRequest) -> Iterator[generated.Fleet]:
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # printed whatever the capture mode
            reporter.write_line(f"\nsatisfiability differential: seed {SEED} (DRA_E2E_SEED={SEED})")
    fleet = generated.fleet(random.Random(SEED), per_device_selection=_per_device_selection())
    for name in fleet.nodes:
        kube.apply(node(name))
        kube.patch("Node", name, None, {"spec": {"taints": None}})
        kube.patch("Node", name, None, _STATUS, subresource="status")
        kube.patch("Node", name, None, {"metadata": {"labels": fleet.labels[name]}})
    for obj in (*fleet.classes, *fleet.slices):
        kube.apply(obj)
    yield fleet
    for obj in fleet.slices:
        kube.delete("ResourceSlice", obj["metadata"]["name"])
    for obj in fleet.classes:
        kube.delete("DeviceClass", obj["metadata"]["name"])
    for name in fleet.nodes:
        kube.delete("Node", name)


def _probe(kube: Kube, namespace: str, fleet: generated.Fleet) -> bool:
    """Whether the webhook's view has the whole fleet: a dry-run claim for each node's last
    GPU (by uuid, tolerating every taint) is ok, and so is one for a GPU of each rack that has
    nodes (the webhook has their labels)."""
    for obj in fleet.slices:
        devices = obj["spec"].get("devices")
        if not devices:
            continue
        if "nodeName" not in obj["spec"] and not _has_nodes(obj["spec"]["pool"]["name"], fleet):
            continue  # a rack without nodes: its GPUs reach none
        gpus = [d for d in devices if d["attributes"]["type"]["string"] == "gpu"]
        uuid = gpus[-1]["attributes"]["uuid"]["string"]
        expression = f'device.attributes["{generated.DRIVER}"].uuid == "{uuid}"'
        body = {
            **o.exactly(generated.GPU_CLASS, 1, expression),
            "tolerations": [{"operator": "Exists"}],
        }
        claim = o.claim("probe", namespace, o.claim_spec(body))
        if verdict(kube.create(claim, dry_run=True).warnings) != "ok":
            return False
    return True


def _has_nodes(rack: str, fleet: generated.Fleet) -> bool:
    return any(labels.get(generated.RACK_LABEL) == rack for labels in fleet.labels.values())


@pytest.fixture(scope="module")
def differential_namespace(kube: Kube) -> Iterator[str]:
    name = kube.namespace("satisfiability-differential", **{"gpu-mode": "dra-only"})
    yield name
    release_devices(kube, name)


def test_the_webhook_agrees_with_the_scheduler_on_generated_claims(
    kube: Kube, generated_fleet: generated.Fleet, differential_namespace: str
) -> None:
    ns, fleet = differential_namespace, generated_fleet
    kube.wait(lambda: _probe(kube, ns, fleet), "the webhook to see the generated fleet", 30)
    rng = random.Random(SEED)
    # the same stream as the fixture's fleet: claims follow it
    generated.fleet(rng, per_device_selection=_per_device_selection())
    disagreements: list[str] = []
    tally: Counter[tuple[str, str]] = Counter()
    for i in range(CLAIMS):
        spec = generated.claim_spec(rng, distinct=_distinct())
        name = f"claim-{i}"
        said, outcome, warnings = _decide(kube, ns, name, spec)
        tally[(said, outcome)] += 1
        if said == "not now":
            continue
        if (said == "ok") != (outcome == "allocated"):
            disagreements.append(
                f"#{i}: webhook {said}, scheduler {outcome}\n  claim {spec}\n  warnings {warnings}"
            )
    print(f"seed {SEED}: {dict(tally)}")
    summary = ", ".join(f"{s}/{o_}: {n}" for (s, o_), n in sorted(tally.items()))
    assert not disagreements, (
        f"seed {SEED}: {len(disagreements)} disagreements ({summary})\n"
        + "\n".join(disagreements)
        + f"\nfleet:\n{fleet.summary()}"
    )
    assert tally[("not now", "allocated")] + tally[("not now", "unschedulable")] <= CLAIMS // 20
    assert tally[("never", "unschedulable")] >= 20, summary
    assert tally[("ok", "allocated")] >= 20, summary


def _decide(kube: Kube, ns: str, name: str, spec: dict[str, object]) -> tuple[str, str, list[str]]:
    """The webhook's verdict on the claim and the scheduler's outcome for a pod using it;
    both are deleted before returning."""
    answer = kube.create(o.claim(name, ns, spec))
    said = verdict(answer.warnings)
    pod_spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)), claims=[{"name": "gpu", "resourceClaimName": name}]
    )
    kube.create(o.pod(name, ns, pod_spec))
    try:
        outcome = kube.wait(lambda: o.pod_outcome(kube, ns, name), f"the verdict on {name}", 30)
        if outcome == "unschedulable" and said == "ok":
            outcome = o.settle_outcome(kube, ns, name)
    finally:
        kube.delete("Pod", name, ns, now=True)
        kube.delete("ResourceClaim", name, ns)
        kube.wait(lambda: kube.find("ResourceClaim", name, ns) is None, f"{name} gone")
    return said, outcome, answer.warnings
