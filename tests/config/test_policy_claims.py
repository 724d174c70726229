"""The quotas, resourceQuotas and defaults sections of the policy file."""

from __future__ import annotations

import pytest

from app.config import load_policy
from app.errors import PolicyError
from tests.helpers import policy_from


def test_the_embedded_default_policy_has_no_quotas_and_no_defaults() -> None:
    policy = load_policy()
    assert policy.quotas == ()
    assert policy.resource_quotas == "deny"
    assert policy.defaults.device_classes == {}
    assert policy.defaults.namespace_device_classes == ()


def test_a_full_quota_entry_parses() -> None:
    policy = policy_from(
        """
quotas:
  - name: research
    namespaceSelector:
      matchLabels: {team: research}
      matchExpressions: [{key: tier, operator: NotIn, values: [cpu]}]
    action: warn
    maxDevicesPerRequest: {"*": 8}
    maxDevicesPerClaim: {gpu.nvidia.com: 8}
    maxDevicesPerNamespace: {gpu.nvidia.com: 16}
    maxClaimsPerNamespace: 0
    allowAllocationModeAll: true
"""
    )
    quota = policy.quotas[0]
    assert quota.action == "warn"
    assert quota.max_devices_per_namespace == {"gpu.nvidia.com": 16}
    assert quota.max_claims_per_namespace == 0
    assert quota.namespace_selector.match_expressions[0].values == ("cpu",)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("quotas: [{maxDevicesPerClaim: {a: 1}}]", "quotas.0.name: Field required"),
        ("quotas: [{name: q, action: block}]", "quotas.0.action"),
        ("quotas: [{name: q, maxDevicesPerClaim: {a: -1}}]", "quotas.0.maxDevicesPerClaim.a"),
        ("quotas: [{name: q, maxDevicesPerClaim: {a: '4'}}]", "quotas.0.maxDevicesPerClaim.a"),
        ("quotas: [{name: q, maxGpus: 4}]", "unknown key `maxGpus` under `quotas.0`"),
        ("quotas: [{name: q}, {name: q}]", "quota name 'q' is used twice"),
        (
            "quotas: [{name: q, namespaceSelector: {matchExpressions: [{key: a, operator: In}]}}]",
            "values must not be empty for operator In",
        ),
        (
            "quotas: [{name: q, namespaceSelector: {matchExpressions: [{key: a, operator: Is}]}}]",
            "quotas.0.namespaceSelector.matchExpressions.0.operator",
        ),
        ("resourceQuotas: maybe", "resourceQuotas"),
        ("defaults: {deviceClasses: {c: {count: 0}}}", "defaults.deviceClasses.c.count"),
        ("defaults: {deviceClasses: {c: {config: [{driver: d}]}}}", "parameters: Field required"),
        (
            "defaults: {deviceClasses: {c: {tolerations: [{operator: Maybe}]}}}",
            "defaults.deviceClasses.c.tolerations.0.operator",
        ),
        (
            "defaults: {namespaceDeviceClasses: [{namespaceSelector: {}}]}",
            "defaults.namespaceDeviceClasses.0.deviceClassName: Field required",
        ),
    ],
)
def test_a_bad_entry_fails_with_the_key_that_is_wrong(text: str, error: str) -> None:
    with pytest.raises(PolicyError, match="test policy:[0-9:]* .*" + error.replace(".", r"\.")):
        policy_from(text)
