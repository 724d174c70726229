"""Near misses in admission (`app/policies/near_misses.py`): a typo of a legacy name is warned
of in every mode, denied in dra-only only where `draOnly.nearMisses: deny` says so, and
silenced by a DeviceClass that maps it."""

from __future__ import annotations

from typing import Any

import pytest

from app.pipeline import Endpoint
from tests.dra_only_cases import container
from tests.helpers import decide, namespace, policy_from

DENY = policy_from("draOnly: {nearMisses: deny}\n")
TYPOS = ("nvidia.con/gpu", "nvidia.com/GPU", "nvidia.com/gpus")


def pod(ns: str, name: str, **extra: Any) -> dict[str, Any]:
    limits = {name: "1", "cpu": "1", "hugepages-2Mi": "1Gi", "example.com/foo": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns},
        "spec": {"containers": [container("a", limits=limits)], **extra},
    }


@pytest.mark.parametrize("name", TYPOS)
@pytest.mark.parametrize("ns", ["gpu-e2e", "ml-audit", "ml-research"])
def test_a_near_miss_is_warned_of_in_every_mode_by_default(ns: str, name: str) -> None:
    decision = decide(pod(ns, name))
    assert decision.allowed
    (warning,) = [w for w in decision.warnings if "did you mean" in w]
    assert warning.startswith(f"spec.containers[0].resources.limits[{name}]: {name}: 1: ")
    assert "did you mean nvidia.com/gpu?" in warning


@pytest.mark.parametrize("name", TYPOS)
def test_a_near_miss_is_denied_in_dra_only_where_the_policy_says_deny(name: str) -> None:
    decision = decide(pod("gpu-e2e", name), policy=DENY)
    assert not decision.allowed
    assert f"limits[{name}]" in decision.message
    assert "did you mean nvidia.com/gpu" in decision.message
    assert decide(pod("ml-audit", name), policy=DENY).allowed  # warned only


def test_a_near_miss_of_the_old_object_is_only_warned_on_update() -> None:
    old = pod("gpu-e2e", "nvidia.con/gpu")
    decision = decide(pod("gpu-e2e", "nvidia.con/gpu"), policy=DENY, operation="UPDATE", old=old)
    assert decision.allowed
    assert any("did you mean" in w for w in decision.warnings)


def test_a_name_a_device_class_maps_is_no_near_miss() -> None:
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpus.example.com"},
        "spec": {"extendedResourceName": "nvidia.com/gpus"},
    }
    objects = [namespace("gpu-e2e", "dra-only"), device_class]
    decision = decide(pod("gpu-e2e", "nvidia.com/gpus"), objects=objects, policy=DENY)
    assert decision.allowed
    assert not any("did you mean" in w for w in decision.warnings)


def test_real_extended_resources_are_never_warned_of() -> None:
    decision = decide(pod("gpu-e2e", "memory"), policy=DENY)
    assert (decision.allowed, decision.warnings) == (True, ())


def test_the_mutating_endpoint_never_warns_of_near_misses() -> None:
    decision = decide(pod("gpu-e2e", "nvidia.con/gpu"), Endpoint.MUTATE, policy=DENY)
    assert decision.allowed
    assert not any("did you mean" in w for w in decision.warnings)
