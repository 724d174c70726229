"""Journey cel-cost: the webhook's compile-time verdict on a DRA selector equals the API server's.

Each selector is created in a ResourceClaim with `dryRun=All` by the admin, in a namespace the
webhook is not registered for, so only the API server's own validation answers (it refuses a
selector over 10 KiB, or whose cel-go cost estimate exceeds 1,000,000: "too complex, exceeds cost
limit"). The same text goes through the webhook's compile path (`CompileCache.get`, what
`compile_check` in the selector policy and `dra-webhook check` call). The table holds cheap
selectors, pairs just under and just over the limit by upstream's estimate (nested `all`/`exists`/
`exists_one` over the attribute and capacity maps, `matches` with a long pattern, string
concatenation, list literals and comprehensions over them, quantity and semver calls, a binding)
and over-long ones.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.cel.cache import CompileCache
from app.cel.cost import MAX_SELECTOR_COST, MAX_SELECTOR_LENGTH, estimate
from app.cel.engine import DEFAULT_BACKEND, SELECTOR
from app.cel.errors import CelCompileError
from app.cel.factory import get_engine
from tests.e2e.kube import ApiError, Kube

pytestmark = pytest.mark.journey("cel-cost")


def _nested_matches(n: int) -> str:
    return (
        "device.attributes.all(d, device.attributes[d].all(k, "
        f'string(device.attributes[d][k]).matches("{"a" * n}")))'
    )


def _capacity_exists(n: int) -> str:
    items = ",".join(str(i) for i in range(n))
    return (
        "device.capacity.exists(d, device.capacity[d].exists(k, device.attributes.exists(x, "
        f'[{items}].exists(i, device.capacity[d][k].compareTo(quantity("1Gi")) > i))))'
    )


def _list_map(n: int) -> str:
    items = ",".join(str(i) for i in range(n))
    return (
        "device.attributes.all(a, device.attributes.all(b, "
        f"[{items}].map(x, x * 2).exists(y, y > 3)))"
    )


def _semver(n: int) -> str:
    items = ",".join(f'"1.{i}.0"' for i in range(n))
    return (
        "device.attributes.all(a, device.attributes[a].all(k, device.capacity.all(c, "
        f'[{items}].all(v, semver(v).isGreaterThan(semver("1.0.0"))))))'
    )


def _contains(n: int) -> str:
    return (
        "device.attributes.exists(d, device.attributes[d].exists(k, "
        f'device.attributes[d].exists(j, "{"z" * n}".contains(k + j))))'
    )


def _exists_one(n: int) -> str:
    items = ",".join(str(i) for i in range(n))
    return (
        "device.attributes.exists_one(d, device.attributes[d].exists_one(k, "
        f"device.capacity.exists_one(c, [{items}].exists_one(i, i == 1))))"
    )


def _concat(n: int) -> str:
    return (
        "device.attributes.all(a, device.attributes.all(b, device.attributes.all(c, "
        f'(a + b + c + "{"y" * n}").startsWith(a))))'
    )


_NESTED_ALL = "device.attributes.all(a, device.attributes.all(b, device.attributes.all(c, {})))"
_LONG = " || ".join(['device.driver == "gpu.nvidia.com"'] * 320)

CASES: list[str] = [
    # cheap
    'device.driver == "gpu.nvidia.com"',
    'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-40GB"',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.allowMultipleAllocations && device.capacity["gpu.nvidia.com"].memory == quantity("1Gi")',
    'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
    'cel.bind(g, device.attributes["gpu.nvidia.com"], g.index > 1 && g.profile == "1g.10gb")',
    'string(device.attributes["d"].s) == string(1)',
    'device.attributes.all(a, device.attributes.all(b, a + b + "' + "w" * 100 + '" != ""))',
    # near the limit, by upstream's estimate: each pair is just under, then just over
    _NESTED_ALL.format("true"),
    "device.attributes.all(z, " + _NESTED_ALL.format("true") + ")",
    _nested_matches(548),
    _nested_matches(549),
    _capacity_exists(1),
    _capacity_exists(2),
    _list_map(47),
    _list_map(48),
    _semver(2),
    _semver(3),
    _contains(20),
    _contains(21),
    _exists_one(4),
    _exists_one(5),
    (
        'cel.bind(xs, device.attributes.map(d, d + "qqq"), device.attributes.all(a, '
        "device.attributes.all(b, xs.exists(x, x.endsWith(a) || x == b))))"
    ),
    _concat(0),
    # unbounded: strings of unknown length compared, searched, matched
    "string(1) == string(2)",
    "string(device.driver) == string(1)",
    'device.attributes["d"].s.matches(string(1))',
    'device.attributes["d"].s.contains(string(1))',
    # over-long (10 KiB), and one just under that length
    _LONG,
    " || ".join(['device.driver == "gpu.nvidia.com"'] * 260),
]


def _claim(namespace: str, expression: str) -> dict[str, object]:
    selector = {"cel": {"expression": expression}}
    request = {
        "name": "r",
        "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [selector]},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "cost", "namespace": namespace},
        "spec": {"devices": {"requests": [request]}},
    }


def _api_server(kube: Kube, namespace: str, expression: str) -> tuple[bool, str]:
    try:
        kube.create(_claim(namespace, expression), dry_run=True)
    except ApiError as error:
        if error.status != 422:
            raise
        return False, error.message
    return True, ""


def _webhook(expression: str) -> tuple[bool, str]:
    try:
        CompileCache().get(get_engine(DEFAULT_BACKEND), expression, SELECTOR)
    except CelCompileError as error:
        return False, error.message
    return True, ""


def _short(expression: str) -> str:
    return (
        expression if len(expression) <= 160 else f"{expression[:150]}... ({len(expression)} chars)"
    )


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 25
    costs = [estimate(e) for e in CASES if len(e) <= MAX_SELECTOR_LENGTH]
    assert any(0.9 * MAX_SELECTOR_COST < c <= MAX_SELECTOR_COST for c in costs)
    assert any(MAX_SELECTOR_COST < c < 1.1 * MAX_SELECTOR_COST for c in costs)
    assert any(len(e) > MAX_SELECTOR_LENGTH for e in CASES)


def test_the_webhook_and_the_api_server_agree_on_every_selector(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace()  # no gpu-mode label: the webhook does not see it
    mismatches = []
    for expression in CASES:
        theirs, their_message = _api_server(kube, ns, expression)
        ours, our_message = _webhook(expression)
        if theirs != ours:
            cost = estimate(expression) if len(expression) <= MAX_SELECTOR_LENGTH else None
            mismatches.append(
                f"{_short(expression)}\n"
                f"  API server: {'accepted' if theirs else 'refused: ' + their_message}\n"
                f"  webhook:    {'accepted' if ours else 'refused: ' + our_message}"
                f" (estimated cost {cost if cost is not None else 'not computed'},"
                f" limit {MAX_SELECTOR_COST:,}; the API server does not report its figure)"
            )
        elif not theirs:
            assert "too complex, exceeds cost limit" in their_message or "Too long" in (
                their_message
            ), their_message
    assert not mismatches, f"{len(mismatches)} of {len(CASES)} verdicts differ:\n" + "\n".join(
        mismatches
    )
