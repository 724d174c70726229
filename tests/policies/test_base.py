"""The values policies take (a request's object decoded once, at the pipeline's edge) and the
helpers every answer uses: how it names the object, what an UPDATE is judged against."""

from __future__ import annotations

import pytest

from app.config import load_policy
from app.errors import ObjectShapeError
from app.policies.base import Request, decode, old_object, subject
from app.workloads import builtin
from tests.claim_objects import claim, exact, template


def review(obj: dict[str, object], kind: str) -> Request:
    return decode(_envelope(obj, kind), builtin(), load_policy().cel)


def _envelope(obj: dict[str, object], kind: str) -> Request:
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


def test_a_claims_spec_is_decoded_once_and_shared_by_the_policies() -> None:
    request = review(claim("c", exact(count=2)), "ResourceClaim")
    parsed = request.claim_spec()
    assert parsed is request.claim_spec()
    assert parsed.path == "spec"
    assert parsed.requests[0].alternatives[0].count == 2
    assert decode(request, builtin(), load_policy().cel) is request  # decoded: as it is


def test_decoding_keeps_every_field_of_the_envelope() -> None:
    raw = _envelope(claim("c", exact()), "ResourceClaim")._replace(groups=("ml",), dry_run=True)
    decoded = decode(raw, builtin(), load_policy().cel)
    assert decoded.decoded and decoded.body.claim is not None
    for field in Request._fields:
        if field not in ("body", "decoded"):
            assert getattr(decoded, field) == getattr(raw, field), field


def test_an_undecoded_request_has_no_claim_spec_to_give() -> None:
    with pytest.raises(LookupError):
        _envelope(claim("c", exact()), "ResourceClaim").claim_spec()


def test_a_request_is_immutable_after_it_is_built() -> None:
    request = review(claim("c", exact()), "ResourceClaim")
    with pytest.raises(AttributeError):  # a named tuple's field cannot be set
        request.decoded = False  # type: ignore[misc]
    assert not hasattr(request, "__dict__")  # slots: no memo can be hung on it either


def test_a_templates_claim_spec_is_read_under_spec_spec() -> None:
    parsed = review(template("t", exact(count=3)), "ResourceClaimTemplate").claim_spec()
    assert parsed.path == "spec.spec"
    assert parsed.requests[0].path == "spec.spec.devices.requests[0]"


def test_a_template_whose_spec_is_not_an_object_names_it() -> None:
    with pytest.raises(ObjectShapeError) as raised:
        review({"kind": "ResourceClaimTemplate", "spec": []}, "ResourceClaimTemplate").claim_spec()
    assert raised.value.path == "spec"


@pytest.mark.parametrize(
    ("obj", "name", "expected"),
    [
        pytest.param(claim("c", exact()), "c", "ResourceClaim c", id="named"),
        pytest.param(
            {"metadata": {"generateName": "trainer-gpu-"}},
            "",
            "ResourceClaim trainer-gpu-",
            id="generate-name",
        ),
        pytest.param({"metadata": {}}, "from-request", "ResourceClaim from-request", id="request"),
        pytest.param(None, "", "ResourceClaim", id="no-name"),
    ],
)
def test_an_answer_names_the_object_by_kind_and_name(
    obj: dict[str, object] | None, name: str, expected: str
) -> None:
    request = review({}, "ResourceClaim")._replace(object=obj, name=name)
    assert subject(request) == expected


def test_only_an_update_is_judged_against_the_object_it_replaces() -> None:
    old = claim("c", exact())
    create = review(claim("c", exact()), "ResourceClaim")._replace(old_object=old)
    assert old_object(create) is None
    update = create._replace(operation="UPDATE")
    assert old_object(update) is old
    assert old_object(update._replace(old_object=None)) is None
