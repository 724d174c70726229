"""The "not now" text prints what is left of a counter or a capacity as the API prints
quantities (canonical form, in the suffix family of the total: ``2Gi of 18Gi``), never in raw
bytes and never below zero: allocated devices can overdraw a counter set (a driver republished
it smaller), and then nothing is left, by a named amount."""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.allocation import NOT_NOW
from app.allocation.not_now import left_text
from app.k8s.quantity import Quantity, parse_quantity
from tests.allocation.helpers import Cluster, request, spec
from tests.allocation.nvidia import DRIVER, allocated_claim, gpu

Make = Callable[..., Cluster]
INT64 = 2**63 - 1


def _partitioned(second: str) -> list[Any]:
    """upstream's partitionable-devices-no-capacity-available, as a valid pool: a counter set
    of 18Gi in one slice, devices of 4Gi and ``second`` in the other."""
    devices = [
        gpu(
            "node-1",
            i,
            capacity={"memory": {"value": amount}},
            consumesCounters=[
                {"counterSet": "counter-set-1", "counters": {"memory": {"value": amount}}}
            ],
        )
        for i, amount in enumerate(("4Gi", second))
    ]

    def pool_slice(name: str, **spec: Any) -> Any:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name, "resourceVersion": "1"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "node-1",
                "pool": {"name": "pool-1", "generation": 1, "resourceSliceCount": 2},
                **spec,
            },
        }

    counters = [{"name": "counter-set-1", "counters": {"memory": {"value": "18Gi"}}}]
    return [
        pool_slice("slice-1", devices=devices),
        pool_slice("slice-2", sharedCounters=counters),
        allocated_claim("held", ("pool-1", "gpu-1")),
    ]


def test_what_a_counter_set_has_left_is_a_quantity_like_its_total(cluster: Make) -> None:
    verdict = cluster(*_partitioned("16Gi")).check(spec(request()))
    assert verdict.outcome == NOT_NOW
    assert verdict.problems[0].message == (
        "not now: 1 of 2 matching devices are allocated to other claims; "
        "counter set counter-set-1 has 2Gi of 18Gi memory left"
    )


def test_an_overdrawn_counter_set_has_nothing_left_by_a_named_amount(cluster: Make) -> None:
    # partitionable-devices-overallocated-capacity-pool: the allocated device draws 20Gi of 18Gi
    verdict = cluster(*_partitioned("20Gi")).check(spec(request()))
    assert verdict.outcome == NOT_NOW
    assert verdict.problems[0].message.endswith(
        "counter set counter-set-1 has 0 of 18Gi memory left (overdrawn by 2Gi)"
    )


def _shared_gpu() -> Any:
    device = gpu(
        "node-a",
        0,
        allowMultipleAllocations=True,
        capacity={"memory": {"value": "80Gi"}},
        consumesCounters=[],
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-a", "resourceVersion": "1"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "devices": [device],
        },
    }


def _shares(amount: str) -> Any:
    return allocated_claim(
        "held", ("node-a", "gpu-0"), shareID="a", consumedCapacity={"memory": amount}
    )


def test_what_a_shared_device_has_left_is_a_quantity_like_its_capacity(cluster: Make) -> None:
    c = cluster(_shared_gpu(), _shares("78Gi"))
    verdict = c.check(spec(request(capacity={"requests": {"memory": "4Gi"}})))
    assert verdict.outcome == NOT_NOW
    assert "device gpu.nvidia.com/node-a/gpu-0 has 2Gi of 80Gi" in verdict.problems[0].message


def test_an_overdrawn_shared_device_has_nothing_left(cluster: Make) -> None:
    c = cluster(_shared_gpu(), _shares("90Gi"))
    verdict = c.check(spec(request(capacity={"requests": {"memory": "4Gi"}})))
    assert verdict.outcome == NOT_NOW
    assert (
        "has 0 of 80Gi gpu.nvidia.com/memory left (overdrawn by 10Gi)"
        in verdict.problems[0].message
    )


# -- any quantities ------------------------------------------------------------------------------

SUFFIXES = ("", "n", "u", "m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3")


@st.composite
def quantities(draw: st.DrawFn) -> Quantity:
    whole = draw(st.integers(0, 10**7))
    fraction = draw(st.sampled_from(("", ".5", ".25", ".001")))
    return parse_quantity(f"{whole}{fraction}{draw(st.sampled_from(SUFFIXES))}")


TEXT = re.compile(r"^(\S+) of (\S+) memory left(?: \(overdrawn by (\S+)\))?$")


@given(total=quantities(), used=quantities())
def test_any_amount_left_is_a_quantity_never_below_zero(total: Quantity, used: Quantity) -> None:
    left = total.value - used.value
    text = left_text(left if left.denominator != 1 else left.numerator, total, "memory")
    found = TEXT.match(text)
    assert found is not None, text
    shown, of, over = found.groups()
    assert not any(q.startswith("-") for q in (shown, of, over or "")), text
    assert parse_quantity(of) == total
    assert parse_quantity(shown).value == max(left, Fraction(0))
    if left < 0:
        assert over is not None
        overdrawn = parse_quantity(over)
        assert overdrawn.sign() > 0
        if -left <= INT64:  # (a binary quantity is capped at 2^63-1, as in Kubernetes)
            assert overdrawn.value == -left
    else:
        assert over is None
