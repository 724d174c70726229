"""Builders shared by the quota tests: the research namespace's policy and one review."""

from __future__ import annotations

from typing import Any

import orjson

from app.config import Policy
from app.pipeline import Decision, Endpoint, Pipeline
from app.transport.review import decode_review
from tests.helpers import policy_from, wrap

Obj = dict[str, Any]

RESEARCH = """
mappings:
  - {resource: nvidia.com/gpu, deviceClassName: gpu.nvidia.com}
quotas:
  - name: research
    namespaceSelector: {matchLabels: {team: research}}
    action: ACTION
    maxDevicesPerRequest: {"*": 8}
    maxDevicesPerClaim: {gpu.nvidia.com: 8}
    maxDevicesPerNamespace: {gpu.nvidia.com: 16}
    maxClaimsPerNamespace: 10
"""


def research_policy(action: str = "deny", extra: str = "") -> Policy:
    return policy_from(RESEARCH.replace("ACTION", action) + extra)


def decide(
    pipeline: Pipeline,
    obj: Obj,
    *,
    operation: str = "CREATE",
    old: Obj | None = None,
    endpoint: Endpoint = Endpoint.VALIDATE,
) -> Decision:
    body = wrap(obj, operation=operation, old=old)
    return pipeline.review(endpoint, decode_review(orjson.dumps(body)))
