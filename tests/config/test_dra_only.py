"""The policy's `draOnly` section (app/config/dra_only.py): `mappedNames` and the key it
replaces."""

from __future__ import annotations

import pytest

from app.config.policy import parse_policy
from app.errors import PolicyError


@pytest.mark.parametrize(
    ("text", "allows"),
    [
        pytest.param("", False, id="default: deny"),
        pytest.param("draOnly: {mappedNames: deny}", False, id="deny"),
        pytest.param("draOnly: {mappedNames: allow}", True, id="allow"),
        pytest.param("draOnly: {allowDeviceClassExtendedResources: true}", True, id="old key"),
        pytest.param("draOnly: {allowDeviceClassExtendedResources: false}", False, id="old off"),
        pytest.param(
            "draOnly: {allowDeviceClassExtendedResources: false, mappedNames: allow}",
            True,
            id="old key off beside allow (the chart's old default values)",
        ),
        pytest.param(
            "draOnly: {allowDeviceClassExtendedResources: true, mappedNames: allow}",
            True,
            id="both say allow",
        ),
    ],
)
def test_mapped_names_are_denied_unless_the_policy_allows_them(text: str, allows: bool) -> None:
    policy = parse_policy(text)
    assert policy.dra_only.allows_mapped_names is allows
    assert policy.dra_only.mapped_names == ("allow" if allows else "deny")


def test_the_deprecated_key_and_mapped_names_deny_together_are_refused_naming_both() -> None:
    with pytest.raises(PolicyError) as error:
        parse_policy("draOnly: {allowDeviceClassExtendedResources: true, mappedNames: deny}")
    assert "draOnly: " in str(error.value)
    assert "allowDeviceClassExtendedResources: true (deprecated) means mappedNames: allow" in str(
        error.value
    )


def test_a_value_other_than_deny_or_allow_is_refused_with_its_key() -> None:
    with pytest.raises(PolicyError, match=r"draOnly\.mappedNames: Input should be 'deny' or"):
        parse_policy("draOnly: {mappedNames: warn}")
