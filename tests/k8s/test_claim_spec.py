"""The claim spec's values mean what they mean to the scheduler: a toleration against a taint."""

from __future__ import annotations

from typing import Any

import pytest

from app.k8s.claims import read_tolerations

TAINT = {"key": "nvidia.com/unhealthy", "value": "xid-79", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "nvidia.com/unhealthy", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        ({"key": "nvidia.com/unhealthy", "value": "xid-79"}, True),
        ({"key": "nvidia.com/unhealthy", "value": "xid-48"}, False),
        ({"key": "nvidia.com/unhealthy", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations_match_taints_as_kubernetes_does(
    toleration: dict[str, Any], tolerated: bool
) -> None:
    (read,) = read_tolerations([toleration])
    assert read.tolerates(TAINT) is tolerated
