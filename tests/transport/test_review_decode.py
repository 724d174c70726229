"""The envelope read without pydantic (`_plain_request`) against the pydantic models: whatever
the plain reader accepts, pydantic accepts too and reads the same values."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import ReviewError
from app.transport.review import _plain_request, _validated_request, decode_review
from tests.helpers import load_fixture

FIXTURES = [
    "pod-create-legacy-gpu",
    "pod-create-with-resourceclaims",
    "pod-update-legacy-gpu",
    "resourceclaim-create-via-v1beta2",
    "resourceclaim-update",
    "pod-create-legacy-gpu-dryrun",
]

# Values a field may be replaced with: the right type, the wrong one, empty, null.
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from(["", "CREATE", "DELETE", "create", "v1", "Pod", "true", "admission.k8s.io/v1"]),
    st.text(max_size=8),
    st.just({}),
    st.just([]),
    st.just({"version": "v1", "kind": "Pod", "resource": "pods", "username": "u"}),
)
# Where a field lives in the review, and its name.
FIELDS = [
    ((), "apiVersion"),
    ((), "kind"),
    ((), "request"),
    *(
        (("request",), name)
        for name in (
            "uid",
            "kind",
            "resource",
            "subResource",
            "requestKind",
            "name",
            "namespace",
            "operation",
            "userInfo",
            "object",
            "oldObject",
            "dryRun",
        )
    ),
    *((("request", "kind"), name) for name in ("group", "version", "kind")),
    *((("request", "resource"), name) for name in ("group", "version", "resource")),
    *((("request", "requestKind"), name) for name in ("group", "version", "kind")),
    (("request", "userInfo"), "username"),
]
EDITS = st.lists(
    st.tuples(st.sampled_from(FIELDS), st.one_of(st.just(None), VALUES), st.booleans()),
    max_size=4,
)


def _edited(review: dict[str, Any], edits: list[Any]) -> dict[str, Any]:
    data = copy.deepcopy(review)
    for (where, name), value, delete in edits:
        node: Any = data
        for key in where:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        if delete:
            node.pop(name, None)
        else:
            node[name] = value
    return data


@given(fixture=st.sampled_from(FIXTURES), edits=EDITS)
def test_what_the_plain_reader_accepts_pydantic_reads_the_same(
    fixture: str, edits: list[Any]
) -> None:
    data = _edited(load_fixture(fixture), edits)
    plain = _plain_request(data)
    if plain is None:
        return  # pydantic decides, as before
    assert plain == _validated_request(data)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_captured_review_is_read_without_pydantic(fixture: str) -> None:
    data = load_fixture(fixture)
    assert _plain_request(data) == _validated_request(data)


@pytest.mark.parametrize(
    ("field", "value"), [("operation", "create"), ("userInfo", None), ("uid", ""), ("name", 3)]
)
def test_a_field_pydantic_refuses_is_refused_with_its_wording(field: str, value: Any) -> None:
    data = load_fixture("pod-create-legacy-gpu")
    data["request"][field] = value
    assert _plain_request(data) is None
    with pytest.raises(
        ReviewError, match=f"not an admission.k8s.io/v1 AdmissionReview: request.{field}"
    ):
        decode_review(orjson.dumps(data))


def test_a_field_pydantic_converts_is_left_to_pydantic() -> None:
    data = load_fixture("pod-create-legacy-gpu")
    data["request"]["dryRun"] = "true"
    assert _plain_request(data) is None
    assert decode_review(orjson.dumps(data)).dry_run is True
