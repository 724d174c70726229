"""Policy `deviceTaints`: its defaults, and mistakes said at their key."""

from __future__ import annotations

import pytest

from app.config import load_policy
from app.config.policy import parse_policy
from app.errors import PolicyError


def test_by_default_nothing_is_denied_and_every_rule_is_warned_about() -> None:
    taints = load_policy().device_taints
    assert (taints.enabled, taints.warnings) == (False, True)
    assert (taints.users, taints.groups, taints.max_evicted_pods) == ((), (), 0)
    assert taints.allow_empty_selector is False


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("deviceTaints: {maxEvictedPods: -1}", "deviceTaints.maxEvictedPods"),
        ("deviceTaints: {users: ['']}", "deviceTaints.users"),
        ("deviceTaints: {groups: [' ops']}", "deviceTaints.groups"),
        ("deviceTaints: {allowEmpty: true}", "allowEmptySelector"),
        ("deviceTaints: {requestAccess: ''}", "deviceTaints.requestAccess"),
    ],
)
def test_a_mistake_is_said_at_its_key(text: str, said: str) -> None:
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, "policy.yaml")
    assert said in str(raised.value)
