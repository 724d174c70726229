"""Consumable capacity as the scheduler computes it (consumable_capacity.go): the one copy the
allocation model and the capacity quotas share (app/allocation/capacity.py)."""

from __future__ import annotations

from typing import Any

import pytest

from app.allocation.capacity import (
    CapacitySpec,
    capacity_spec,
    consumed,
    fits,
    request_policy,
    rounded,
)
from app.k8s.quantity import parse_quantity as q

Obj = dict[str, Any]

RANGE = CapacitySpec(q("80Gi"), q("80Gi"), (), q("1Gi"), q("80Gi"), q("1Gi"), True)
VALUES = CapacitySpec(q("80Gi"), q("10Gi"), (q("10Gi"), q("40Gi"), q("80Gi")), has_policy=True)


@pytest.mark.parametrize(
    ("spec", "requested", "taken"),
    [
        (RANGE, "4000Mi", "4Gi"),  # DESIGN: rounded up to min + n*step
        (RANGE, "100Mi", "1Gi"),  # at least min
        (RANGE, None, "80Gi"),  # not requested: the default
        (VALUES, "11Gi", "40Gi"),  # the smallest valid value at or above
        (VALUES, None, "10Gi"),
        (CapacitySpec(q("80Gi")), None, "80Gi"),  # no policy: the whole value
        (CapacitySpec(q("80Gi")), "3Gi", "3Gi"),
    ],
)
def test_what_a_request_consumes(spec: CapacitySpec, requested: str | None, taken: str) -> None:
    assert consumed(q(requested) if requested else None, spec) == q(taken)


@pytest.mark.parametrize(
    ("amount", "policy", "expected"),
    [
        ("4000Mi", {"validRange": {"min": "1Gi", "step": "1Gi"}}, "4Gi"),
        ("4Gi", {"validRange": {"min": "1Gi", "step": "1Gi"}}, "4Gi"),
        ("100Mi", {"validRange": {"min": "1Gi", "step": "1Gi"}}, "1Gi"),
        ("90Gi", {"validRange": {"min": "1Gi", "max": "80Gi", "step": "1Gi"}}, "90Gi"),
        ("3", {"validRange": {"min": "1", "max": "4", "step": "1"}}, "3"),
        ("5Gi", {"validRange": {"min": "1Gi"}}, "5Gi"),
        ("11Gi", {"validValues": ["10Gi", "20Gi", "40Gi"]}, "20Gi"),
        ("10Gi", {"validValues": ["10Gi", "20Gi", "40Gi"]}, "10Gi"),
        ("50Gi", {"validValues": ["10Gi", "20Gi", "40Gi"]}, "50Gi"),
        ("4000Mi", None, "4000Mi"),
    ],
)
def test_quota_counts_what_the_scheduler_consumes_but_an_amount_past_max_as_written(
    amount: str, policy: Obj | None, expected: str
) -> None:
    assert rounded(q(amount), request_policy(policy)) == q(expected)
    spec = request_policy(policy)
    if spec.maximum is None or consumed(q(amount), spec).value <= spec.maximum.value:
        assert consumed(q(amount), spec) == q(expected)  # the allocator's figure: one rule


def test_a_device_capacity_entry_is_read_with_its_policy_and_fits_what_is_left() -> None:
    spec = capacity_spec(
        {"value": "80Gi", "requestPolicy": {"validRange": {"min": "1Gi", "step": "1Gi"}}}
    )
    assert spec is not None and spec.has_policy and spec.minimum == q("1Gi")
    assert capacity_spec({"value": "lots"}) is None
    capacity = {"gpu.nvidia.com/memory": spec}
    asked = {"memory": q("4000Mi")}
    assert fits("gpu.nvidia.com", capacity, asked, None, None) == {
        "gpu.nvidia.com/memory": q("4Gi")
    }
    taken = {"gpu.nvidia.com/memory": q("77Gi")}
    assert fits("gpu.nvidia.com", capacity, asked, taken, None) is None
    assert fits("gpu.nvidia.com", capacity, {"cores": q("1")}, None, None) is None
