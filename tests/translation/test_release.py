"""What translation and the class defaults write depends on what the release keeps
(app.cluster.release): a GPU share on a release that drops consumable capacity is refused with
the reason, or made whole devices where the policy says so; never written to be dropped."""

from __future__ import annotations

import pytest

from app.cluster import release
from app.cluster.release import Feature, ServedRelease
from app.config import load_policy
from app.config.policy import Policy
from app.pipeline import Endpoint
from app.policies.defaults import ClaimDefaults, plan
from tests.sharing_objects import SHARED, container, decide, pipeline, pod

HAMI = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4k"}


def _policy(**translation: str) -> Policy:
    return Policy.model_validate({"translation": translation}) if translation else load_policy()


@pytest.mark.parametrize("version", ["v1.34.12", "1.35"])
def test_a_hami_share_is_refused_naming_the_release_and_the_gate(version: str) -> None:
    p = pipeline()
    p.view.set_release(ServedRelease.from_defaults(version))  # type: ignore[attr-defined]
    decision = decide(p, pod(container("cuda", HAMI)), Endpoint.MUTATE)
    assert decision.allowed is False
    message = decision.message
    assert f"Kubernetes {version} does not keep `exactly.capacity`" in message
    assert "DRAConsumableCapacity is off" in message
    assert "spec.containers[0].resources.limits[nvidia.com/gpu]" in message
    assert "translation.sharesWithoutCapacity: wholeDevices" in message
    assert not decision.patch


def test_the_same_share_is_translated_on_a_release_that_keeps_it() -> None:
    p = pipeline()
    p.view.set_release(ServedRelease.from_defaults("v1.36.5"))  # type: ignore[attr-defined]
    decision = decide(p, pod(container("cuda", HAMI)), Endpoint.MUTATE)
    assert decision.allowed is True
    assert decision.patch


def test_where_the_policy_says_so_a_share_becomes_a_whole_device_with_a_warning() -> None:
    p = pipeline(_policy(sharesWithoutCapacity="wholeDevices"))
    p.view.set_release(ServedRelease.from_defaults("1.34"))  # type: ignore[attr-defined]
    decision = decide(p, pod(container("cuda", HAMI)), Endpoint.MUTATE)
    assert decision.allowed is True, decision.message
    warning = next(w for w in decision.warnings if "not a share" in w)
    assert f"a whole device of DeviceClass {SHARED}" in warning
    assert "nvidia.com/gpumem: 4k" in warning
    templates = [op for op in decision.patch if "resourceClaims" in op["path"]]
    assert templates
    written = str(decision.templates)
    assert "capacity" not in written
    assert "allowMultipleAllocations" not in written


def test_an_unknown_release_keeps_nothing_some_release_drops() -> None:
    unknown = ServedRelease.unknown()
    assert not unknown.keeps(Feature.CONSUMABLE_CAPACITY)
    assert not unknown.keeps(Feature.DEVICE_TAINTS)
    assert unknown.keeps(Feature.PRIORITIZED_LIST)


@pytest.mark.parametrize(
    ("version", "capacity", "taints"),
    [("v1.34.12", False, False), ("v1.35.8", False, False), ("v1.36.5", True, True),
     ("v1.37.2", True, True), ("v1.40.0", True, True)],
)  # fmt: skip
def test_release_defaults_follow_each_minor(version: str, capacity: bool, taints: bool) -> None:
    release = ServedRelease.from_defaults(version)
    assert release.keeps(Feature.CONSUMABLE_CAPACITY) is capacity
    assert release.keeps(Feature.DEVICE_TAINTS) is taints


def test_class_tolerations_are_not_added_where_the_release_drops_them() -> None:
    tolerations = [{"key": "maintenance", "operator": "Exists"}]
    policy = Policy.model_validate(
        {"defaults": {"deviceClasses": {"gpu.nvidia.com": {"tolerations": tolerations}}}}
    )
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml-research"},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }  # fmt: skip
    defaults = ClaimDefaults(policy.defaults)
    kept = plan("ResourceClaim", claim, defaults, {})
    assert any(op["path"].endswith("/tolerations") for op in kept.patch)
    why = ServedRelease.from_defaults("1.34").drops(Feature.DEVICE_TAINTS)
    dropped = plan("ResourceClaim", claim, defaults, {}, why)
    assert not any(op["path"].endswith("/tolerations") for op in dropped.patch)
    assert any("DRADeviceTaints is off" in added for added in dropped.added)


def _claim_with_distinct() -> dict[str, object]:
    same = 'device.attributes["gpu.nvidia.com"].productName == "H100"'
    request = {"deviceClassName": SHARED, "count": 1, "selectors": [{"cel": {"expression": same}}]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "two", "namespace": "ml-research"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "r0", "exactly": request},
                    {"name": "r1", "exactly": request},
                ],
                "constraints": [
                    {"requests": ["r0", "r1"], "distinctAttribute": "gpu.nvidia.com/productName"}
                ],
            }
        },
    }


def test_a_distinct_attribute_is_modelled_as_the_release_scheduler_allocates_it() -> None:
    """Two shareable H100s that share their productName: a distinctAttribute on it can never
    hold from 1.35; on 1.34 the scheduler checks only that the attribute is there (seen on a real
    1.34.12: both allocated), and the author reads that the values may repeat."""
    newest = pipeline()
    newest.view.set_release(ServedRelease.from_defaults("v1.35.8"))  # type: ignore[attr-defined]
    answer = decide(newest, _claim_with_distinct(), Endpoint.VALIDATE)
    assert "distinctAttribute gpu.nvidia.com/productName across requests r0, r1" in str(
        answer.warnings
    )
    older = pipeline()
    older.view.set_release(ServedRelease.from_defaults("v1.34.12"))  # type: ignore[attr-defined]
    answer = decide(older, _claim_with_distinct(), Endpoint.VALIDATE)
    assert answer.allowed is True
    said = " ".join(answer.warnings)
    assert "Kubernetes v1.34.12's scheduler checks only that each device has" in said
    assert "not that the values differ" in said
    assert "spec.devices.constraints[0]" in said
    assert "no node has devices" not in said


@pytest.mark.parametrize(
    ("version", "frees"),
    [("v1.34.12", False), ("v1.35.8", False), ("v1.36.2", False), ("v1.36.3", True),
     ("v1.36.5", True), ("v1.37.2", True)],
)  # fmt: skip
def test_a_refused_devices_counters_come_back_from_1_36_3(version: str, frees: bool) -> None:
    """k8s.io/dynamic-resource-allocation's rollbackDevice (v0.36.3 on); the seeded differential
    against the real 1.36.5 scheduler found it (tests/e2e/test_satisfiability_differential.py,
    seed 20261124, claim 26: a MIG device whose GPU a distinctAttribute had refused)."""
    assert ServedRelease.from_defaults(version).frees_refused_counters is frees
    assert ServedRelease.assumed().frees_refused_counters is True


@pytest.mark.parametrize("version", ["v1.34.12", "v1.35.6", "v1.36.5", "v1.37.2", "v1.40.0"])
def test_no_release_in_the_matrix_preempts_for_dra(version: str) -> None:
    """The Kubernetes DRA docs, "Limitations"; KEP-5690 missed 1.37 (shown on 1.34, 1.36.5 and
    1.37 by tests/e2e/test_preemption.py)."""
    assert ServedRelease.from_defaults(version).preempts_for_dra is False
    assert ServedRelease.assumed().preempts_for_dra is False


def test_a_release_that_preempts_for_dra_is_one_table_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(release, "PREEMPTS_FOR_DRA", frozenset({37}))
    assert ServedRelease.from_defaults("v1.37.2").preempts_for_dra is True
    assert ServedRelease.from_defaults("v1.41.0").preempts_for_dra is True  # newer: as the newest
    assert ServedRelease.from_defaults("v1.36.5").preempts_for_dra is False


@pytest.mark.parametrize(
    ("version", "served", "gated"),
    [
        ("1.34", (), "DRADeviceTaints"),
        ("1.35", (), "DRADeviceTaintRules"),
        ("v1.36.5", (), "DRADeviceTaintRules"),
        ("v1.37.2", ("v1",), None),
        ("1.40", ("v1",), None),
    ],
)
def test_where_a_release_serves_device_taint_rules_and_whether_they_act_by_default(
    version: str, served: tuple[str, ...], gated: str | None
) -> None:
    release = ServedRelease.from_defaults(version)
    assert release.taint_rules == served
    said = release.taint_rules_gated()
    assert (said is None) if gated is None else (said is not None and gated in said)


def test_an_unknown_release_says_nothing_of_taint_rule_gates() -> None:
    assert ServedRelease.assumed().taint_rules_gated() is None
