"""The pipeline's prepared steps (`Pipeline.prepare`): the selector check's new selectors compiled
ahead of the review, one per step, within the review's compile budget; the decision is the same
whether the steps ran or not."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from app.config import Policy, load_policy
from app.pipeline import REGISTRATIONS, Decision, Endpoint, Pipeline, Registration
from app.policies.base import ALLOW, Context, Request, Result
from app.policies.cel_runtime import cel_runtime
from app.transport.review import decode_review
from tests.claim_objects import claim, exact
from tests.helpers import load_fixture, make_view, policy_from, wrap

Obj = dict[str, Any]

SMALL_BUDGET = "cel: {compileBudget: {expressions: 3, milliseconds: 60000}}"


def _claim(*expressions: str, namespace: str = "gpu-e2e") -> Obj:
    selectors = [{"cel": {"expression": e}} for e in expressions]
    return claim("c", exact(selectors=selectors), namespace=namespace)


def _new(count: int, tag: int = 0) -> list[str]:
    """Distinct selectors no cache has seen."""
    return [f'device.attributes["gpu.nvidia.com"].index == {tag * 1000 + i}' for i in range(count)]


def _request(obj: Obj, pipeline: Pipeline | None = None) -> Request:
    """The request as the transport hands it on: decoded once (`Pipeline.decode`), so that
    what is prepared and what is reviewed share one CEL budget."""
    request = decode_review(orjson.dumps(wrap(obj)))
    return (pipeline or _pipeline()).decode(Endpoint.VALIDATE, request)


def _pipeline(policy: Policy | None = None) -> Pipeline:
    return Pipeline(policy or load_policy(), make_view(), own_namespace="dra-webhook")


def _steps(pipeline: Pipeline, endpoint: Endpoint, request: Request) -> Iterator[None]:
    return pipeline.prepare(endpoint, request) or iter(())


def _compiled(pipeline: Pipeline) -> int:
    return pipeline.parts[cel_runtime].cache.size


def test_most_reviews_have_nothing_to_prepare() -> None:
    pipeline = _pipeline()
    pod = decode_review(orjson.dumps(load_fixture("pod-create-legacy-gpu")))
    assert pipeline.prepare(Endpoint.VALIDATE, pod) is None
    assert pipeline.prepare(Endpoint.MUTATE, _request(_claim(*_new(3)))) is None


def test_a_claims_new_selectors_are_compiled_ahead_one_per_step() -> None:
    pipeline = _pipeline()
    before = _compiled(pipeline)
    request = _request(_claim(*_new(5), *_new(5)), pipeline)  # each twice: compiled once
    assert len(list(_steps(pipeline, Endpoint.VALIDATE, request))) == 5
    assert _compiled(pipeline) == before + 5
    assert pipeline.review(Endpoint.VALIDATE, request).allowed
    assert _compiled(pipeline) == before + 5  # the check found them compiled
    again = _request(_claim(*_new(5)), pipeline)
    assert list(_steps(pipeline, Endpoint.VALIDATE, again)) == []


def test_reading_many_selectors_is_a_step_of_its_own() -> None:
    (one,) = _new(1)
    same = [{"cel": {"expression": one}}] * 32
    many = claim("c", *(exact(f"r{i}", selectors=same) for i in range(9)), namespace="gpu-e2e")
    assert len(list(_steps(_pipeline(), Endpoint.VALIDATE, _request(many)))) == 2
    few = _claim(one, one)
    assert len(list(_steps(_pipeline(), Endpoint.VALIDATE, _request(few)))) == 1


def test_preparing_stops_at_the_compile_budget_and_the_review_answers_at_once() -> None:
    pipeline = _pipeline(policy_from(SMALL_BUDGET))
    before = _compiled(pipeline)
    request = _request(_claim(*_new(10)), pipeline)
    assert len(list(_steps(pipeline, Endpoint.VALIDATE, request))) == 3
    decision = pipeline.review(Endpoint.VALIDATE, request)
    assert not decision.allowed
    assert "compile budget of 3 new CEL expressions (cel.compileBudget.expressions)" in (
        decision.message
    )
    assert _compiled(pipeline) == before + 3  # the review's budget was spent ahead


def _device_class(*expressions: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "example"},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


CASES = {
    "new selectors": (_claim(*_new(4)), ""),
    "one does not compile": (_claim(*_new(2), "device.nope(", *_new(2, 1)), ""),
    "over the bytes": (_claim(*(f"{e} || {'true || ' * 200}true" for e in _new(50))), ""),
    "over the count": (_claim(*_new(10)), SMALL_BUDGET),
    "over the units": (_claim(*_new(10)), "cel: {reviewBudget: 2500}"),
    "malformed": ({**_claim(), "spec": {"devices": {"requests": [exact(selectors=[3])]}}}, ""),
    "unknown namespace": (_claim(*_new(2), namespace="nowhere"), ""),
    "a DeviceClass": (_device_class(*_new(3)), ""),
    "a template": (
        {**_claim(), "kind": "ResourceClaimTemplate", "spec": {"spec": _claim(*_new(3))["spec"]}},
        "",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_decision_is_the_same_prepared_or_not(case: str) -> None:
    obj, policy = CASES[case]
    decisions: list[Decision] = []
    for prepared in (False, True):
        pipeline = _pipeline(policy_from(policy))
        request = _request(obj, pipeline)
        if prepared:
            for _ in _steps(pipeline, Endpoint.VALIDATE, request):
                pass
        decisions.append(pipeline.review(Endpoint.VALIDATE, request))
    assert decisions[0] == decisions[1]


def test_a_prepare_that_raises_leaves_the_work_and_the_answer_to_its_check() -> None:
    seen: list[str] = []

    def prepare(request: Request, ctx: Context) -> Iterator[None]:
        seen.append("prepare")
        yield
        raise RuntimeError("a bug")

    def check(request: Request, ctx: Context) -> Result:
        seen.append("check")
        return ALLOW

    (selectors,) = (r for r in REGISTRATIONS if r.name == "cel-selectors")
    registration = Registration(
        "prepared", Endpoint.VALIDATE, selectors.kinds, selectors.operations, check, prepare=prepare
    )
    pipeline = Pipeline(load_policy(), make_view(), "dra-webhook", (registration,))
    request = _request(_claim("true"))
    assert len(list(_steps(pipeline, Endpoint.VALIDATE, request))) == 1
    assert pipeline.review(Endpoint.VALIDATE, request).allowed
    assert seen == ["prepare", "check"]
