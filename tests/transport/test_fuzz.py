"""Fuzzing the endpoints: no body, however odd, gets a 500 or crashes the app."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import FIXTURE_NAMES, AppHarness, build_app, json_paths, load_fixture


@pytest.fixture(scope="module")
def app() -> Any:
    """One app for every example: hypothesis forbids function-scoped fixtures in @given."""
    harness = build_app()
    yield harness
    harness.client.__exit__(None, None, None)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)

FIXTURES = {name: load_fixture(name) for name in FIXTURE_NAMES}


PATHS = {name: [p for p in json_paths(body) if p] for name, body in FIXTURES.items()}


def _replace(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    body = copy.deepcopy(body)
    node = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return body


def _check(app: AppHarness, content: bytes) -> None:
    for endpoint in ("validate", "mutate"):
        http = app.post(endpoint, content)
        assert http.status_code in (200, 400), http.text
        if http.status_code == 200:
            response = http.json()["response"]
            assert isinstance(response["allowed"], bool)
            assert response["uid"]


@given(value=json_values)
def test_arbitrary_json_is_answered_with_200_or_400(app: AppHarness, value: Any) -> None:
    _check(app, orjson.dumps(value))


@given(data=st.data(), name=st.sampled_from(FIXTURE_NAMES))
def test_real_reviews_with_one_subtree_replaced_never_get_a_500(
    app: AppHarness, data: st.DataObject, name: str
) -> None:
    path = data.draw(st.sampled_from(PATHS[name]))
    value = data.draw(json_values)
    _check(app, orjson.dumps(_replace(FIXTURES[name], path, value)))


@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_are_answered_with_400(app: AppHarness, data: bytes) -> None:
    for endpoint in ("validate", "mutate"):
        assert app.post(endpoint, data).status_code == 400  # 200 bytes cannot hold a review
