"""Counting the devices a claim spec asks for."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import ObjectShapeError
from app.k8s.claims import count_claim_spec, template_claim_spec
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
