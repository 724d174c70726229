"""Claim quotas when several entries select a namespace: the strictest limit wins."""

from __future__ import annotations

import pytest

from app.config import Policy
from tests.claim_objects import claim, cluster_objects, exact
from tests.helpers import make_pipeline, policy_from
from tests.policies.quota.helpers import decide


def _two_entries(wide: str, research_only: str) -> Policy:
    """Two entries selecting ml-research, their limits given as flow-mapping bodies."""
    return policy_from(
        "quotas:\n"
        "  - {name: wide, namespaceSelector: {matchExpressions: [{key: team, operator: Exists}]}, "
        f"{wide}}}\n"
        "  - {name: research-only, namespaceSelector: {matchLabels: {team: research}}, "
        f"{research_only}}}\n"
    )


@pytest.mark.parametrize(
    ("first_", "second", "count", "allowed", "expected"),
    [
        pytest.param(
            "maxDevicesPerNamespace: {gpu.nvidia.com: 16}",
            "maxDevicesPerNamespace: {'*': 14}",
            3,
            False,
            "allows 14, 12 in use (quota research-only)",
            id="smaller-star-beats-larger-class-limit",
        ),
        pytest.param(
            "maxDevicesPerNamespace: {gpu.nvidia.com: 14}",
            "maxDevicesPerNamespace: {'*': 16}",
            3,
            False,
            "allows 14, 12 in use (quota wide)",
            id="smaller-class-limit-beats-star",
        ),
        pytest.param(
            "maxDevicesPerNamespace: {gpu.nvidia.com: 16}",
            "action: warn, maxDevicesPerNamespace: {gpu.nvidia.com: 13}",
            3,
            True,
            "allows 13, 12 in use (quota research-only); allowed (warn only)",
            id="warn-below-deny-warns",
        ),
        pytest.param(
            "maxDevicesPerNamespace: {gpu.nvidia.com: 16}",
            "action: warn",
            5,
            False,
            "allows 16, 12 in use (quota wide)",
            id="deny-beats-warn",
        ),
        pytest.param(
            "maxDevicesPerRequest: {'*': 4}",
            "maxDevicesPerRequest: {gpu.nvidia.com: 2}",
            3,
            False,
            "at most 2 per request (quota research-only)",
            id="per-request-strictest",
        ),
        pytest.param(
            "maxDevicesPerRequest: {'*': 8}, allowAllocationModeAll: true",
            "maxDevicesPerClaim: {'*': 8}",
            None,
            False,
            "where 8 are allowed per claim; use ExactCount (quota research-only)",
            id="all-denied-by-the-entry-that-forbids-it",
        ),
    ],
)
def test_the_strictest_limit_wins_when_entries_overlap(
    first_: str, second: str, count: int | None, allowed: bool, expected: str
) -> None:
    policy = _two_entries(first_, second)
    pipeline = make_pipeline(cluster_objects(), policy)
    request = exact(count=count) if count is not None else exact(mode="All")
    decision = decide(pipeline, claim("c", request))
    assert decision.allowed is allowed, decision.message
    assert expected in (decision.message + "\n".join(decision.warnings))


def test_one_breach_is_reported_per_limit_even_when_several_entries_are_exceeded() -> None:
    policy = _two_entries(
        "maxDevicesPerNamespace: {gpu.nvidia.com: 16}",
        "maxDevicesPerNamespace: {gpu.nvidia.com: 14}",
    )
    decision = decide(make_pipeline(cluster_objects(), policy), claim("c", exact(count=5)))
    assert decision.message.count("needs 5 devices") == 1
    assert "(quota research-only)" in decision.message
