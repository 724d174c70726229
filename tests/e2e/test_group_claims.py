"""Journey group-claims: a Workload's or PodGroup's `resourceClaims` (one claim shared by every pod
of the group) checked like a pod's claims: the namespace's DeviceClass allow-list, quota charged
once for the group and not again for its pods, satisfiability, and `report` counting them
(docs/quotas.md, "Group claims").

The API is off by default: the control plane turns on feature gates GenericWorkload and
DRAWorkloadResourceClaims and `scheduling.k8s.io/v1beta1` on 1.37 (`v1alpha2` on 1.36, whose
resourceClaims have the same shape) through `OPT_IN` (tests/e2e/controlplane.py). Before 1.36
there are no group claims: skipped there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from app.cli import main
from tests.assets import control_plane_release
from tests.e2e import objects as o
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import ApiError, Kube

pytestmark = [
    pytest.mark.journey("group-claims"),
    pytest.mark.usefixtures("webhook"),
    pytest.mark.since(36, "Workload and PodGroup resourceClaims (DRAWorkloadResourceClaims) "
                      "first come in 1.36"),
]  # fmt: skip

Obj = dict[str, Any]
TEAM_A = {"dra-tenant": "team-a"}  # tests/e2e/values.yaml: may use gpu.nvidia.com only
QUOTA = {"dra-quota": "small"}  # tests/e2e/values.yaml: 4 devices of gpu.nvidia.com


def _version() -> str:
    return "v1beta1" if control_plane_release()[0] >= 37 else "v1alpha2"


def _group(kind: str, name: str, ns: str, template: str) -> Obj:
    entry = {"name": "gpus", "resourceClaimTemplateName": template}
    gang = {"gang": {"minCount": 2}}
    if kind == "PodGroup":
        spec: Obj = {"schedulingPolicy": gang, "resourceClaims": [entry]}
    else:
        spec = {
            "podGroupTemplates": [
                {"name": "workers", "schedulingPolicy": gang, "resourceClaims": [entry]}
            ]
        }
    return {
        "apiVersion": f"scheduling.k8s.io/{_version()}",
        "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def _create(kube: Kube, obj: Obj) -> list[str]:
    plural = "podgroups" if obj["kind"] == "PodGroup" else "workloads"
    return kube.create_custom(obj, plural).warnings


def _template(kube: Kube, ns: str, name: str, device_class: str, count: int) -> None:
    kube.create(o.claim_template(name, ns, o.claim_spec(o.exactly(device_class, count))))


def _denied(kube: Kube, obj: Obj) -> bool:
    """Whether a dry-run create of `obj` is refused (the webhook's view caught up)."""
    plural = "podgroups" if obj["kind"] == "PodGroup" else "workloads"
    try:
        kube.create_custom(obj, plural, dry_run=True)
    except ApiError as error:
        return error.status == 403
    return False


def _member(name: str, ns: str, group: str, template: str) -> Obj:
    spec = o.pod_spec(o.container("train", claims=("gpus",)))
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    spec["schedulingGroup"] = {"podGroupName": group}
    return o.pod(name, ns, spec)


@pytest.mark.parametrize("kind", ["PodGroup", "Workload"])
def test_a_group_claim_naming_a_class_the_namespace_may_not_use_is_denied(
    kube: Kube, namespace: Callable[..., str], kind: str
) -> None:
    ns = namespace()  # no labels yet: the template is made before the allow-list applies
    _template(kube, ns, "mig", "mig.nvidia.com", 1)
    kube.patch("Namespace", ns, None, {"metadata": {"labels": {"gpu-mode": "dra-only", **TEAM_A}}})
    group = _group(kind, "trainer", ns, "mig")
    kube.wait(lambda: _denied(kube, group), "the webhook to see the namespace's labels")
    with pytest.raises(ApiError) as denied:
        _create(kube, group)
    assert denied.value.status == 403
    field = (
        "spec.resourceClaims[0].resourceClaimTemplateName"
        if kind == "PodGroup"
        else "spec.podGroupTemplates[0].resourceClaims[0].resourceClaimTemplateName"
    )
    assert (
        f"{field}: group claim gpus: ResourceClaimTemplate mig (spec.spec.devices.requests[0]"
        in denied.value.message
    )
    assert f"DeviceClass mig.nvidia.com, which namespace {ns} may not use" in denied.value.message


def test_quota_is_charged_once_for_the_group_and_not_again_for_its_pods(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only", **QUOTA)
    _template(kube, ns, "three-gpus", "gpu.nvidia.com", 3)
    _template(kube, ns, "two-gpus", "gpu.nvidia.com", 2)
    _create(kube, _group("PodGroup", "big", ns, "three-gpus"))
    second = _group("PodGroup", "second", ns, "two-gpus")  # 3 held by the first + 2: over 4
    kube.wait(lambda: _denied(kube, second), "the webhook to see the group's claim")
    with pytest.raises(ApiError) as denied:
        _create(kube, second)
    assert (
        f"PodGroup second needs group claim gpus (template two-gpus): 2 = 2 devices of "
        f"gpu.nvidia.com, once for the group (its pods share the claim); namespace {ns} allows "
        "4, 3 in use (quota e2e-small)"
    ) in denied.value.message
    # the group's claim was made once, for the PodGroup, before any pod
    (made,) = kube.list("ResourceClaim", ns)
    assert made["metadata"]["ownerReferences"][0]["kind"] == "PodGroup"
    # its pods use it without being charged: four pods x 3 devices would be 12 of 4
    for i in range(4):
        kube.create(_member(f"worker-{i}", ns, "big", "three-gpus"))
    assert len(kube.list("ResourceClaim", ns)) == 1
    # a pod outside the group naming the same template gets a claim of its own: charged
    with pytest.raises(ApiError) as outsider:
        pod = _member("outsider", ns, "big", "three-gpus")
        del pod["spec"]["schedulingGroup"]
        kube.create(pod)
    assert f"namespace {ns} allows 4, 3 in use" in outsider.value.message


def test_an_unsatisfiable_group_claim_is_answered_as_a_claim_of_pods_is(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    """Two GPUs per node: a group claim for three is never satisfiable (the policy's
    `cel.selectors.unsatisfiable`, warn here, as for a pod's claims)."""
    ns = namespace("dra-only")
    own = kube.create(
        o.claim("probe", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 3))), dry_run=True
    )
    _template(kube, ns, "three-gpus", "gpu.nvidia.com", 3)
    warnings = _create(kube, _group("PodGroup", "trainer", ns, "three-gpus"))
    field = "spec.resourceClaims[0].resourceClaimTemplateName (template three-gpus) "
    said = [w for w in warnings if w.startswith(field)]
    assert said == [
        f"{field}spec.spec.devices.requests[0]: asks for 3 devices on one node; the most on any "
        "node is 2 (node-a, node-b)"
    ]
    # the same verdict, in the same words, as the claim alone gets
    assert own.warnings == [
        "spec.devices.requests[0]: asks for 3 devices on one node; the most on any node is 2 "
        "(node-a, node-b)"
    ]


def test_report_counts_the_group_claims(
    kube: Kube,
    namespace: Callable[..., str],
    control_plane: ControlPlane,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ns = namespace("audit")
    _template(kube, ns, "two-gpus", "gpu.nvidia.com", 2)
    _create(kube, _group("Workload", "trainer", ns, "two-gpus"))
    _create(kube, _group("PodGroup", "trainer-workers", ns, "two-gpus"))
    capsys.readouterr()
    code = main(["report", "--kubeconfig", str(control_plane.kubeconfig()), "--output", "json"])
    assert code in (0, 1)
    rows = {r["namespace"]: r for r in orjson.loads(capsys.readouterr().out)}
    assert sorted(rows[ns]["group_claims"]) == [
        "PodGroup/trainer-workers: spec.resourceClaims[0].resourceClaimTemplateName: group "
        "claim gpus (template two-gpus), one claim shared by the group's pods",
        "Workload/trainer: spec.podGroupTemplates[0].resourceClaims[0]."
        "resourceClaimTemplateName: group claim gpus (template two-gpus), one claim shared by "
        "the group's pods for each PodGroup made from it",
    ]
