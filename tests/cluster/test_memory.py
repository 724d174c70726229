"""The view's memory per device and per claim stays bounded (full numbers: the benchmark)."""

from __future__ import annotations

from app.cluster.view import Kind
from tests.cluster.memory import claims_wire, measure, slices_wire


def test_a_device_costs_the_view_under_2_kib_and_a_third_of_its_decoded_size() -> None:
    cost = measure(Kind.RESOURCE_SLICE, slices_wire(320), 320)
    assert cost.per_unit(cost.view_bytes) < 2048
    assert cost.view_bytes < cost.decoded_bytes / 2.5


def test_a_claim_costs_the_view_under_5_kib_and_a_third_of_its_decoded_size() -> None:
    cost = measure(Kind.RESOURCE_CLAIM, claims_wire(160), 160)
    assert cost.per_unit(cost.view_bytes) < 5 * 1024
    assert cost.view_bytes < cost.decoded_bytes / 3
