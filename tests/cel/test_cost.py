"""CEL cost: Kubernetes' limits on DRA selectors, and a CEL budget per review."""

from __future__ import annotations

import time

import pytest

from app.cel.cache import CompileCache
from app.cel.cost import MAX_SELECTOR_COST, Budget, BudgetExceededError, estimate
from app.cel.engine import SELECTOR, Engine
from app.cel.errors import CelCompileError
from app.pipeline import Endpoint
from app.transport.review import decode_review
from tests.claim_objects import claim
from tests.conftest import make_pipeline, policy_from, wrap

NESTED = (
    "device.attributes.all(a, device.attributes.all(b, device.attributes.all(c, "
    "device.attributes.all(d, a == d))))"
)


def test_a_selector_over_the_cost_limit_does_not_compile(engine: Engine) -> None:
    assert estimate(NESTED) > MAX_SELECTOR_COST
    with pytest.raises(CelCompileError, match=r"estimated cost .* exceeds the limit of 1,000,000"):
        CompileCache().get(engine, NESTED, SELECTOR)


def test_a_selector_over_10_kib_does_not_compile(engine: Engine) -> None:
    long = " || ".join(['device.driver == "gpu.nvidia.com"'] * 400)
    assert len(long) > 10 * 1024
    with pytest.raises(CelCompileError, match="over the limit of 10,240"):
        CompileCache().get(engine, long, SELECTOR)


@pytest.mark.parametrize(
    ("expression", "low", "high"),
    [
        ('device.driver == "gpu.nvidia.com"', 2, 10),
        ("device.attributes.all(a, true)", 32, 100),
        ("[1, 2, 3].all(x, x > 0)", 3, 20),
        ("device.attributes.all(a, device.attributes.all(b, true))", 1024, 5000),
    ],
)
def test_estimates_grow_with_iteration(expression: str, low: int, high: int) -> None:
    assert low <= estimate(expression) <= high


def test_a_compiled_selector_carries_its_estimate(engine: Engine) -> None:
    program = CompileCache().get(engine, "device.attributes.all(a, true)", SELECTOR)
    assert program.cost == estimate("device.attributes.all(a, true)")


def test_a_budget_raises_once_spent() -> None:
    budget = Budget(10)
    budget.charge(10)
    with pytest.raises(BudgetExceededError, match="budget of 10 cost units"):
        budget.charge(1)


def _huge_claim() -> dict[str, object]:
    body = claim("huge")
    requests = []
    for r in range(32):
        alternatives = []
        for k in range(8):
            selectors = [
                {
                    "cel": {
                        "expression": f'device.attributes["gpu.nvidia.com"].index == {r * 1000 + k * 32 + s}'
                    }
                }
                for s in range(32)
            ]
            alternatives.append(
                {"name": f"a{k}", "deviceClassName": "gpu.nvidia.com", "selectors": selectors}
            )
        requests.append({"name": f"r{r}", "firstAvailable": alternatives})
    body["spec"] = {"devices": {"requests": requests}}
    return body


@pytest.mark.parametrize(("mode", "allowed"), [("closed", False), ("open", True)])
def test_a_huge_claim_is_stopped_at_the_review_budget(mode: str, allowed: bool) -> None:
    policy = policy_from(f"failure:\n  celBudget: {mode}\n")
    pipeline = make_pipeline(policy=policy)
    request = decode_review(__import__("orjson").dumps(wrap(_huge_claim())))
    started = time.perf_counter()
    decision = pipeline.review(Endpoint.VALIDATE, request)
    elapsed = time.perf_counter() - started
    assert elapsed < 3.0
    assert decision.allowed is allowed
    text = decision.message if not allowed else " ".join(decision.warnings)
    assert "CEL budget of 1,000,000 cost units (cel.reviewBudget)" in text
