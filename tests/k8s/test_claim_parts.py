"""Capacity requests and tolerations of a claim request, read as values."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.k8s.claim_parts import Toleration, capacity_requests, tolerations
from app.k8s.claims import SELECTING, parse_claim_spec
from app.k8s.quantity import parse_quantity

PATH = "spec.devices.requests[0].exactly.capacity.requests"


def test_amounts_are_quantities_as_the_api_server_canonicalizes_them() -> None:
    found, errors = capacity_requests({"memory": "4k", "shares": 1}, PATH)
    assert found == {"memory": parse_quantity("4000"), "shares": parse_quantity("1")}
    assert errors == ()


@pytest.mark.parametrize(
    ("amount", "message"),
    [("-1Gi", "must not be negative, not -1Gi"), ("lots", "must be a quantity, not 'lots'")],
)
def test_a_bad_amount_is_an_error_with_its_path(amount: str, message: str) -> None:
    found, errors = capacity_requests({"memory": amount}, PATH)
    assert found == {}
    assert errors == ((f"{PATH}[memory]", message),)


def test_the_claim_model_stops_the_selector_check_on_a_bad_amount() -> None:
    spec = {
        "devices": {
            "requests": [
                {
                    "name": "r",
                    "exactly": {"deviceClassName": "c", "capacity": {"requests": {"m": "?"}}},
                }
            ]
        }
    }
    error = parse_claim_spec(spec).first_error(SELECTING)
    assert error is not None
    assert error.path == f"{PATH}[m]"


@given(
    st.dictionaries(
        st.text(max_size=8),
        st.one_of(st.text(max_size=12), st.integers(), st.none(), st.floats(), st.booleans()),
    )
)
def test_any_capacity_map_is_read_without_raising(value: dict[str, Any]) -> None:
    found, errors = capacity_requests(value, PATH)
    assert len(found) + len(errors) == len(value)
    assert all(q.sign() >= 0 for q in found.values())


TAINT = {"key": "nvidia.com/unhealthy", "value": "xid-79", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "nvidia.com/unhealthy", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        ({"key": "nvidia.com/unhealthy", "value": "xid-79"}, True),
        ({"key": "nvidia.com/unhealthy", "value": "xid-48"}, False),
        ({"key": "nvidia.com/unhealthy", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations_match_taints_as_kubernetes_does(
    toleration: dict[str, Any], tolerated: bool
) -> None:
    (read,) = tolerations([toleration])
    assert read.tolerates(TAINT) is tolerated


@given(
    st.lists(
        st.one_of(
            st.none(),
            st.integers(),
            st.dictionaries(
                st.sampled_from(["key", "operator", "value", "effect"]),
                st.one_of(st.text(max_size=5), st.integers()),
            ),
        )
    )
)
def test_any_toleration_list_is_read_without_raising(value: list[Any]) -> None:
    for toleration in tolerations(value):
        assert isinstance(toleration, Toleration)
        toleration.tolerates(TAINT)
