"""JSONPatch operations and JSON-pointer escaping (RFC 6901): a pointer cannot be mis-escaped."""

from __future__ import annotations

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.k8s import patch


@pytest.mark.parametrize(
    ("token", "escaped"),
    [
        ("nvidia.com/gpu", "nvidia.com~1gpu"),
        ("a~b", "a~0b"),
        ("~/", "~0~1"),
        ("~1", "~01"),  # `~` first, or `~1` would read back as `/`
        ("plain", "plain"),
    ],
)
def test_a_token_escapes_tilde_before_slash(token: str, escaped: str) -> None:
    assert patch.escape(token) == escaped


def test_a_pointer_is_its_tokens_escaped_and_joined_with_numbers_as_text() -> None:
    assert patch.pointer("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu") == (
        "/spec/containers/0/resources/limits/nvidia.com~1gpu"
    )
    assert patch.pointer() == ""


def test_the_operations_are_the_rfc_6902_shapes() -> None:
    assert patch.add("/a", [1]) == {"op": "add", "path": "/a", "value": [1]}
    assert patch.remove("/a") == {"op": "remove", "path": "/a"}
    assert patch.replace("/a", 2) == {"op": "replace", "path": "/a", "value": 2}


@given(st.text(min_size=1, max_size=20), st.integers())
def test_any_key_is_reached_by_its_pointer(key: str, value: int) -> None:
    """A key holding `/` and `~` in any order is the key the applied patch touches."""
    document = {"limits": {key: "old", "other": "kept"}}
    ops = [patch.replace(patch.pointer("limits", key), value)]
    result = jsonpatch.apply_patch(document, ops)
    assert result["limits"][key] == value
    if key != "other":
        assert result["limits"]["other"] == "kept"
    removed = jsonpatch.apply_patch(document, [patch.remove(patch.pointer("limits", key))])
    assert key not in removed["limits"]
