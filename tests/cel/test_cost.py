"""CEL cost: Kubernetes' limits on DRA selectors, and a CEL budget per review."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from app.cel.cache import CompileCache
from app.cel.cost import (
    MAX_SELECTOR_COST,
    Budget,
    BudgetExceededError,
    coarse_estimate,
    estimate,
)
from app.cel.engine import SELECTOR, Engine
from app.cel.errors import CelCompileError
from app.config.policy import CompileBudget
from app.pipeline import Endpoint
from app.policies.cel_runtime import cel_runtime
from app.transport.review import decode_review
from tests.claim_objects import claim
from tests.helpers import make_pipeline, policy_from, wrap

Obj = dict[str, Any]

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


# Upstream figures: the first group is quoted from Kubernetes' own table of DRA selector costs
# (k8s.io/dynamic-resource-allocation/cel, compile_test.go, `expectCost`); the others are derived
# by hand with cel-go's rules (checker/cost.go) and the DRA size bounds, and their verdicts were
# confirmed against a v1.36.2 API server (tests/e2e/test_cel_cost.py runs that comparison).
UPSTREAM_COSTS = [
    ("true", 0),
    ('device.driver == ""', 2),
    ('device.driver == "dra.example.com"', 4),
    ('"no-such-domain" in device.attributes', 3),
    ('device.attributes["dra.example.com"].name', 4),
    ('device.attributes["dra.example.com"]["name"]', 4),
    ('device.attributes["dra.example.com"].name > 0', 5),
    ('device.attributes["dra.example.com"].name == "fish"', 5),
    ('cel.bind(dra, device.attributes["dra.example.com"], dra.name)', 15),
    ('device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))', 6),
    # derived: 2 (range) + 0 (init) + 1 (result) + 32 x (2 (condition) + 1 (step `@result && true`))
    ("device.attributes.all(a, true)", 99),
    # 10 (list) + 1 + 3 x (2 + 3)
    ("[1, 2, 3].all(x, x > 0)", 26),
    # 3 + 32 x (2 + 1 + 99)
    ("device.attributes.all(a, device.attributes.all(b, true))", 3267),
    ("device.attributes.all(a, device.attributes.all(b, device.attributes.all(c, true)))", 104643),
    (NESTED.replace("a == d", "true"), 3348675),
    # Quantity == Quantity is O(1) in Kubernetes' library
    ('device.capacity["d"].memory == quantity("1Gi")', 6),
    # string(dyn) may be bytes_to_string, whose result is as long as the attribute (64)
    ('string(device.attributes["d"].s) == string(1)', 19),
    # contains: ceil(64 x 0.1)^2 + 4 (target) + 4 (argument)
    ('device.attributes["d"].s.contains(device.attributes["d"].t)', 57),
]


@pytest.mark.parametrize(("expression", "cost"), UPSTREAM_COSTS)
def test_the_estimate_is_upstreams(expression: str, cost: int) -> None:
    assert estimate(expression) == cost


@pytest.mark.parametrize(
    "expression",
    [
        "string(1) == string(2)",  # two strings of unknown length
        'device.attributes["d"].s.matches(string(1))',  # a pattern of unknown length
        "string(device.driver) == string(1)",
    ],
)
def test_unbounded_sizes_make_an_unbounded_cost(expression: str) -> None:
    assert estimate(expression) > MAX_SELECTOR_COST


def test_syntax_the_port_cannot_parse_falls_back_to_the_coarse_bound() -> None:
    expression = 'device.attributes["d"].?x.orValue(1) > 0'
    assert estimate(expression) == coarse_estimate(expression)


def test_a_compiled_selector_carries_its_estimate(engine: Engine) -> None:
    program = CompileCache().get(engine, "device.attributes.all(a, true)", SELECTOR)
    assert program.cost == estimate("device.attributes.all(a, true)")


def test_a_budget_raises_once_spent() -> None:
    budget = Budget(10)
    budget.charge(10)
    with pytest.raises(BudgetExceededError, match="budget of 10 cost units"):
        budget.charge(1)


def test_a_budget_admits_the_text_of_distinct_expressions_up_to_its_bytes() -> None:
    limits = CompileBudget(bytes=120)
    Budget(10**9, limits).admit(["a" * 60, "b" * 60, "a" * 60])  # a repeat compiles once
    over = Budget(10**9, limits)
    with pytest.raises(BudgetExceededError, match=r"hold 121 bytes .* \(cel.compileBudget.bytes\)"):
        over.admit(["a" * 60, "b" * 61])
    with pytest.raises(BudgetExceededError, match="hold 121 bytes"):
        over.admit(iter(()))  # one object per review: read once, refused again
    with pytest.raises(BudgetExceededError, match="hold 122 bytes"):
        Budget(10**9, limits).admit(["é" * 61])  # bytes, not characters
    Budget(10**9).admit(["a" * 10**6])  # without compile limits: units only


def test_a_budget_refuses_a_new_compile_past_its_count_or_its_time() -> None:
    budget = Budget(10**9, CompileBudget(expressions=2, milliseconds=5))
    budget.before_compile()
    budget.count_compile(0.001)
    budget.count_compile(0.001)
    with pytest.raises(BudgetExceededError, match=r"2 new CEL expressions \(cel.compileBudget"):
        budget.before_compile()
    timed = Budget(10**9, CompileBudget(expressions=100, milliseconds=5))
    timed.count_compile(0.004)
    timed.before_compile()
    timed.count_compile(0.002)
    with pytest.raises(BudgetExceededError, match=r"5 ms of CEL compiling \(cel.compileBudget"):
        timed.before_compile()


def _huge_claim(requests: int = 32, alternatives: int = 8, selectors: int = 32) -> Obj:
    """A claim within the API server's limits, every selector distinct and valid."""
    body = claim("huge")
    n = iter(range(10**6))
    body["spec"] = {
        "devices": {
            "requests": [
                {
                    "name": f"r{r}",
                    "firstAvailable": [
                        {
                            "name": f"a{k}",
                            "deviceClassName": "gpu.nvidia.com",
                            "selectors": [
                                {
                                    "cel": {
                                        "expression": 'device.attributes["gpu.nvidia.com"]'
                                        f".index == {next(n)}"
                                    }
                                }
                                for _ in range(selectors)
                            ],
                        }
                        for k in range(alternatives)
                    ],
                }
                for r in range(requests)
            ]
        }
    }
    return body


@pytest.mark.parametrize(
    ("policy", "shape", "named"),
    [
        pytest.param("", (32, 8, 32), "(cel.compileBudget.bytes)", id="8192-selectors-bytes"),
        pytest.param(
            "cel: {compileBudget: {expressions: 20, milliseconds: 60000}}",
            (4, 8, 4),
            "20 new CEL expressions (cel.compileBudget.expressions)",
            id="count",
        ),
        pytest.param(
            "cel: {compileBudget: {expressions: 100000, milliseconds: 1}}",
            (4, 8, 4),
            "1 ms of CEL compiling (cel.compileBudget.milliseconds)",
            id="time",
        ),
        pytest.param(
            "cel: {reviewBudget: 5000}",
            (4, 8, 4),
            "budget of 5,000 cost units (cel.reviewBudget)",
            id="units",
        ),
    ],
)
@pytest.mark.parametrize(("mode", "allowed"), [("closed", False), ("open", True)])
def test_a_huge_claim_is_answered_naming_the_budget_it_spent(
    policy: str, shape: tuple[int, int, int], named: str, mode: str, allowed: bool
) -> None:
    pipeline = make_pipeline(policy=policy_from(f"{policy}\nfailure:\n  celBudget: {mode}\n"))
    request = decode_review(orjson.dumps(wrap(_huge_claim(*shape))))
    started = time.perf_counter()
    decision = pipeline.review(Endpoint.VALIDATE, request)
    elapsed = time.perf_counter() - started
    assert elapsed < 3.0  # generous: a correctness bound, the figures are in docs/benchmarks.md
    assert decision.allowed is allowed
    text = decision.message if not allowed else " ".join(decision.warnings)
    assert named in text
    assert pipeline.parts[cel_runtime].cache.size < 40  # nothing past the budget was compiled
