"""The claim model: a claim spec read into values with paths, and counting what it asks for."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import ObjectShapeError
from app.k8s.claim_count import count_claim_spec
from app.k8s.claims import (
    COUNTING,
    SELECTING,
    FieldError,
    Toleration,
    capacity_requests,
    device_class_selectors,
    parse_claim_spec,
    read_tolerations,
    template_claim_spec,
)
from app.k8s.quantity import parse_quantity
from tests.claim_objects import GPU, claim_spec, exact, first, sub, template

MIG = "mig.nvidia.com"
AMD = "gpu.amd.com"


@pytest.mark.parametrize(
    ("spec", "devices", "unbounded"),
    [
        pytest.param(claim_spec(exact(count=3)), {GPU: 3}, set(), id="exact-count"),
        pytest.param(claim_spec(exact(count=None, mode=None)), {GPU: 1}, set(), id="defaults-1"),
        pytest.param(claim_spec(exact(mode="All")), {}, {GPU}, id="all-is-unbounded"),
        pytest.param(
            claim_spec(first("gpu", sub("big", count=4), sub("small", count=2), sub("m", MIG, 7))),
            {GPU: 4, MIG: 7},
            set(),
            id="first-available-largest-per-class",
        ),
        pytest.param(
            claim_spec(first("gpu", sub("two", count=2), sub("all", mode="All"), sub("m", MIG))),
            {MIG: 1},
            {GPU},
            id="first-available-with-all",
        ),
        pytest.param(
            claim_spec(exact("a", count=2), exact("b", count=3), exact("c", AMD, 1)),
            {GPU: 5, AMD: 1},
            set(),
            id="multiple-requests-add-up",
        ),
        pytest.param(
            claim_spec(exact(count=2), exact("watch", count=2, adminAccess=True)),
            {GPU: 4},
            set(),
            id="admin-access-counts",
        ),
        pytest.param(
            claim_spec(exact("a", count=2), exact("b", mode="All")),
            {GPU: 2},
            {GPU},
            id="exact-and-all-of-one-class",
        ),
        pytest.param(
            {"devices": {"requests": [{"name": "old", "deviceClassName": GPU, "count": 2}]}},
            {GPU: 2},
            set(),
            id="v1beta1-flat-request",
        ),
        pytest.param({}, {}, set(), id="no-devices"),
        pytest.param(None, {}, set(), id="no-spec"),
        pytest.param({"devices": {"requests": []}}, {}, set(), id="no-requests"),
    ],
)
def test_claim_spec_counts_devices_per_class(
    spec: Any, devices: dict[str, int], unbounded: set[str]
) -> None:
    counted = count_claim_spec(spec)
    assert dict(counted.devices) == devices
    assert counted.unbounded == unbounded


def test_each_request_is_counted_with_its_path_and_admin_flag() -> None:
    counted = count_claim_spec(claim_spec(exact(count=2), exact("watch", adminAccess=True)))
    assert [(r.name, r.path, dict(r.devices), r.admin_access) for r in counted.requests] == [
        ("gpu", "spec.devices.requests[0]", {GPU: 2}, False),
        ("watch", "spec.devices.requests[1]", {GPU: 1}, True),
    ]


def test_template_claim_spec_is_counted_with_template_paths() -> None:
    spec, path = template_claim_spec(template("t", exact(count=3)))
    counted = count_claim_spec(spec, path)
    assert counted.requests[0].path == "spec.spec.devices.requests[0]"
    assert dict(counted.devices) == {GPU: 3}


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"devices": []}, "spec.devices"),
        ({"devices": {"requests": {"name": "gpu"}}}, "spec.devices.requests"),
        ({"devices": {"requests": ["gpu"]}}, "spec.devices.requests[0]"),
        (claim_spec(exact(count="2")), "spec.devices.requests[0].exactly.count"),
        (claim_spec(exact(count=0)), "spec.devices.requests[0].exactly.count"),
        (claim_spec(exact(mode="Some")), "spec.devices.requests[0].exactly.allocationMode"),
        (claim_spec(exact(device_class=3)), "spec.devices.requests[0].exactly.deviceClassName"),
        (claim_spec(exact(adminAccess="yes")), "spec.devices.requests[0].exactly.adminAccess"),
        (claim_spec({"name": "gpu", "exactly": "x"}), "spec.devices.requests[0].exactly"),
        (
            claim_spec({"name": "gpu", "firstAvailable": {}}),
            "spec.devices.requests[0].firstAvailable",
        ),
        (claim_spec(first("gpu", "x")), "spec.devices.requests[0].firstAvailable[0]"),
    ],
)
def test_a_malformed_claim_spec_names_the_field(spec: Any, path: str) -> None:
    with pytest.raises(ObjectShapeError) as raised:
        count_claim_spec(spec)
    assert raised.value.path == path


# -- the claim model ------------------------------------------------------------------------------


def test_a_claim_spec_is_read_into_requests_and_alternatives_with_paths() -> None:
    spec = claim_spec(
        exact(
            "one",
            selectors=[{"cel": {"expression": "device.driver == 'x'"}}],
            capacity={"requests": {"memory": "4Gi"}},
            tolerations=[{"key": "k", "operator": "Exists"}],
        ),
        first("two", sub("big", count=4), sub("all", MIG, mode="All")),
    )
    spec["devices"]["constraints"] = [{"requests": ["one"], "matchAttribute": "d/numa"}]
    spec["devices"]["config"] = [{"opaque": {"driver": "d", "parameters": {"a": 1}}}]
    parsed = parse_claim_spec(spec)
    one, two = parsed.requests
    (exactly,) = one.alternatives
    assert (one.name, one.path, exactly.path) == (
        "one",
        "spec.devices.requests[0]",
        "spec.devices.requests[0].exactly",
    )
    assert exactly.selectors == (
        ("spec.devices.requests[0].exactly.selectors[0].cel.expression", "device.driver == 'x'"),
    )
    assert (exactly.device_class, exactly.count, exactly.needed) == (GPU, 1, 1)
    assert dict(exactly.capacity) == {"memory": "4Gi"}
    assert exactly.tolerations == ({"key": "k", "operator": "Exists"},)
    assert [
        (a.name, a.path, a.device_class, a.all_devices, a.needed) for a in two.alternatives
    ] == [
        ("big", "spec.devices.requests[1].firstAvailable[0]", GPU, False, 4),
        ("all", "spec.devices.requests[1].firstAvailable[1]", MIG, True, 1),
    ]
    (constraint,) = parsed.constraints
    assert (constraint.path, constraint.requests, constraint.match_attribute) == (
        "spec.devices.constraints[0]",
        ("one",),
        "d/numa",
    )
    (config,) = parsed.config
    assert (config.path, config.requests, config.driver, config.parameters) == (
        "spec.devices.config[0]",
        (),
        "d",
        {"a": 1},
    )
    assert parsed.first_error(COUNTING) is None
    assert parsed.first_error(SELECTING) is None


def test_a_v1beta1_request_is_its_own_alternative() -> None:
    parsed = parse_claim_spec({"devices": {"requests": [{"name": "old", "deviceClassName": GPU}]}})
    (alternative,) = parsed.requests[0].alternatives
    assert (alternative.path, alternative.device_class) == ("spec.devices.requests[0]", GPU)


@pytest.mark.parametrize(
    ("spec", "counting", "selecting"),
    [
        pytest.param(
            claim_spec(exact(count=0)),
            "spec.devices.requests[0].exactly.count: must be at least 1, not 0",
            None,
            id="count-below-one-stops-counting-only",
        ),
        pytest.param(
            claim_spec({"name": "gpu", "exactly": {"deviceClassName": GPU, "count": None}}),
            None,
            "spec.devices.requests[0].exactly.count: must be an integer",
            id="null-count-stops-selecting-only",
        ),
        pytest.param(
            claim_spec(exact(selectors="x")),
            None,
            "spec.devices.requests[0].exactly.selectors: must be a list",
            id="selectors-not-a-list",
        ),
        pytest.param(
            claim_spec(exact(selectors=[{"cel": {"expression": 3}}])),
            None,
            "spec.devices.requests[0].exactly.selectors[0].cel.expression: must be a string",
            id="expression-not-a-string",
        ),
        pytest.param(
            claim_spec(exact(mode="Some")),
            "spec.devices.requests[0].exactly.allocationMode: must be ExactCount or All, not 'Some'",
            None,
            id="unknown-mode",
        ),
        pytest.param(
            claim_spec({"name": 3, "exactly": {"deviceClassName": GPU}}),
            "spec.devices.requests[0].name: must be a string",
            None,
            id="name-not-a-string",
        ),
        pytest.param(
            claim_spec(exact(count="2")),
            "spec.devices.requests[0].exactly.count: must be an integer",
            "spec.devices.requests[0].exactly.count: must be an integer",
            id="count-not-an-integer-stops-both",
        ),
        pytest.param(
            claim_spec(first("gpu", sub("a", count=2), "x")),
            "spec.devices.requests[0].firstAvailable[1]: must be an object",
            "spec.devices.requests[0].firstAvailable[1]: must be an object",
            id="subrequest-not-an-object",
        ),
        pytest.param(
            {"devices": {"requests": "x"}},
            "spec.devices.requests: must be a list",
            "spec.devices.requests: must be a list",
            id="requests-not-a-list",
        ),
    ],
)
def test_errors_are_values_with_the_field_path_and_the_readers_they_stop(
    spec: Any, counting: str | None, selecting: str | None
) -> None:
    parsed = parse_claim_spec(spec)

    def text(error: FieldError | None) -> str | None:
        return None if error is None else f"{error.path}: {error.message}"

    assert text(parsed.first_error(COUNTING)) == counting
    assert text(parsed.first_error(SELECTING)) == selecting


def _selectors(n: int) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f"device.attributes['d'].i == {i}"}} for i in range(n)]


@pytest.mark.parametrize(
    ("spec", "path", "message", "readers"),
    [
        pytest.param(
            claim_spec(*(exact(f"r{i}") for i in range(10_000))),
            "spec.devices.requests",
            "must have at most 32 items, not 10,000",
            COUNTING | SELECTING,
            id="requests",
        ),
        pytest.param(
            claim_spec(first("gpu", *(sub(f"s{i}") for i in range(9)))),
            "spec.devices.requests[0].firstAvailable",
            "must have at most 8 items, not 9",
            COUNTING | SELECTING,
            id="subrequests",
        ),
        pytest.param(
            claim_spec(exact(selectors=_selectors(33))),
            "spec.devices.requests[0].exactly.selectors",
            "must have at most 32 items, not 33",
            SELECTING,
            id="selectors",
        ),
    ],
)
def test_a_list_over_the_api_servers_limit_is_an_error_and_its_items_are_not_read(
    spec: Any, path: str, message: str, readers: int
) -> None:
    parsed = parse_claim_spec(spec)
    assert parsed.first_error(readers) == FieldError(path, message, readers)
    assert not [s for r in parsed.requests for a in r.alternatives for s in a.selectors]


def test_lists_at_the_api_servers_limits_are_read_whole() -> None:
    requests = [first(f"r{r}", *(sub(f"s{k}") for k in range(8))) for r in range(32)]
    for request in requests:
        for alternative in request["firstAvailable"]:
            alternative["selectors"] = _selectors(32)
    parsed = parse_claim_spec(claim_spec(*requests))
    assert not parsed.malformed
    assert sum(len(a.selectors) for r in parsed.requests for a in r.alternatives) == 8192


def test_a_device_class_with_too_many_selectors_is_an_error() -> None:
    selectors, errors = device_class_selectors({"spec": {"selectors": _selectors(33)}})
    assert selectors == ()
    assert errors == (
        FieldError("spec.selectors", "must have at most 32 items, not 33", SELECTING),
    )


def test_the_first_error_is_the_first_in_document_order() -> None:
    spec = claim_spec(exact("a", count="x"), "not a request")
    assert parse_claim_spec(spec).first_error(COUNTING) == FieldError(
        "spec.devices.requests[0].exactly.count", "must be an integer", COUNTING | SELECTING
    )


def test_device_class_selectors_are_read_with_paths_and_malformed_ones_skipped() -> None:
    device_class = {
        "spec": {
            "selectors": [
                {"cel": {"expression": "device.driver == 'a'"}},
                "x",
                {"cel": {"expression": 3}},
                {"cel": {"expression": "true"}},
            ]
        }
    }
    selectors, errors = device_class_selectors(device_class)
    assert selectors == (
        ("spec.selectors[0].cel.expression", "device.driver == 'a'"),
        ("spec.selectors[3].cel.expression", "true"),
    )
    assert [(e.path, e.message) for e in errors] == [
        ("spec.selectors[1]", "must be an object"),
        ("spec.selectors[2].cel.expression", "must be a string"),
    ]
    assert device_class_selectors(None) == ((), ())
    assert device_class_selectors({"spec": []})[1] == (
        FieldError("spec", "must be an object", SELECTING),
    )


# -- capacity amounts and tolerations, read as values ---------------------------------------------

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
    for toleration in read_tolerations(value):
        assert isinstance(toleration, Toleration)
        toleration.tolerates(TAINT)
