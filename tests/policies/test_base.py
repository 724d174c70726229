"""The values policies take: a request's claim spec is read once per review."""

from __future__ import annotations

import pytest

from app.errors import ObjectShapeError
from app.policies.base import Request
from tests.claim_objects import claim, exact, template


def review(obj: dict[str, object], kind: str) -> Request:
    return Request(
        uid="u",
        group="resource.k8s.io",
        version="v1",
        kind=kind,
        resource="resourceclaims",
        sub_resource="",
        operation="CREATE",
        namespace="ml-research",
        name="",
        object=obj,
        old_object=None,
        dry_run=False,
        username="alice",
        request_version="v1",
    )


def test_a_claims_spec_is_read_once_and_shared_by_the_policies() -> None:
    request = review(claim("c", exact(count=2)), "ResourceClaim")
    parsed = request.claim_spec()
    assert parsed is request.claim_spec()
    assert parsed.path == "spec"
    assert parsed.requests[0].alternatives[0].count == 2


def test_a_templates_claim_spec_is_read_under_spec_spec() -> None:
    parsed = review(template("t", exact(count=3)), "ResourceClaimTemplate").claim_spec()
    assert parsed.path == "spec.spec"
    assert parsed.requests[0].path == "spec.spec.devices.requests[0]"


def test_a_template_whose_spec_is_not_an_object_names_it() -> None:
    with pytest.raises(ObjectShapeError) as raised:
        review({"kind": "ResourceClaimTemplate", "spec": []}, "ResourceClaimTemplate").claim_spec()
    assert raised.value.path == "spec"
