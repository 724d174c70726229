"""The DeviceTaintRule guard: the warning with a rule's reach, and policy deviceTaints' denials."""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import Policy
from app.pipeline import Decision, Endpoint, Pipeline
from app.transport.review import decode_review
from tests.helpers import json_paths, make_pipeline, policy_from, wrap
from tests.policies import taint_objects as t

Obj = dict[str, Any]
GUARDED = """
deviceTaints:
  enabled: true
  users: [alice]
  groups: [gpu-operators]
  maxEvictedPods: 1
  requestAccess: "ask in #gpu-platform"
"""
EMPTY_ALLOWED = GUARDED + "  allowEmptySelector: true\n"
ONE_DEVICE = {"driver": t.DRIVER, "pool": "node-a", "device": "gpu-2"}
NODE_A = {"pool": "node-a"}


def _review(pipeline: Pipeline, obj: Obj, user: str = "tester", groups: tuple[str, ...] = (),
            **wrap_args: Any) -> Decision:  # fmt: skip
    body = wrap(obj, **wrap_args)
    body["request"]["userInfo"] = {"username": user, "groups": list(groups)}
    return pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(body)))


def _pipeline(text: str = "") -> Pipeline:
    policy: Policy = policy_from(text) if text else policy_from("{}")
    return make_pipeline(t.cluster(), policy)


@pytest.fixture(scope="module")
def guarded() -> Pipeline:
    return _pipeline(GUARDED)


@pytest.fixture(scope="module")
def empty_allowed() -> Pipeline:
    return _pipeline(EMPTY_ALLOWED)


def test_by_default_every_rule_is_allowed_with_what_it_would_evict() -> None:
    decision = _review(_pipeline(), t.rule("drain", {}))
    assert decision.allowed
    assert decision.warnings == (
        "DeviceTaintRule drain would evict 4 pods in 2 namespaces: ml-a (3: a-0, a-1, a-2), "
        "ml-b (1: b-0) (every device in the cluster: 9 devices in 3 pools selected; 1 claim "
        "tolerates it)",
    )


def test_a_rule_naming_one_device_names_its_one_pod() -> None:
    decision = _review(_pipeline(), t.rule("one", ONE_DEVICE))
    assert decision.warnings == (
        "DeviceTaintRule one would evict 1 pod in 1 namespace: ml-a (1: a-2) "
        "(1 device in 1 pool selected)",
    )


def test_many_pods_are_counted_per_namespace_and_the_list_is_bounded() -> None:
    objects = t.cluster() + [
        t.held_claim(f"team-{n}", f"c{i}", [("node-x", f"gpu-{n}-{i}")], [f"p{i}"])
        for n in range(7)
        for i in range(2 + n)
    ]
    pipeline = make_pipeline(objects, policy_from("{}"))
    (warning,) = _review(pipeline, t.rule("x", {"pool": "node-x"})).warnings
    assert warning.startswith(
        "DeviceTaintRule x would evict 35 pods in 7 namespaces: team-6 (8), team-5 (7), "
        "team-4 (6), team-3 (5), team-2 (4) and 2 more ("
    )


@pytest.mark.parametrize(
    ("effect", "said"),
    [
        # pool node-a of both drivers: a pool is named per driver
        ("NoSchedule", "would keep 5 devices in 2 pools off new claims that do not tolerate "
                       "example.com/maintenance:NoSchedule (2 of them free now); the 2 claims "
                       "holding the others keep them (3 pods in 1 namespace: ml-a (3: a-0, a-1, "
                       "a-2), not evicted)"),
        ("None", "marks 5 devices in 2 pools with example.com/maintenance:None: nothing is "
                 "evicted or kept off; as NoExecute it would evict 3 pods in 1 namespace: ml-a "
                 "(3: a-0, a-1, a-2)"),
    ],
)  # fmt: skip
def test_no_schedule_and_none_say_what_they_keep_off_instead(effect: str, said: str) -> None:
    decision = _review(_pipeline(), t.rule("r", NODE_A, effect))
    assert decision.warnings == (f"DeviceTaintRule r {said}",)


class Case(NamedTuple):
    id: str
    selector: Obj | None
    effect: str
    user: str
    groups: tuple[str, ...]
    allowed: bool
    paths: tuple[str, ...] = ()


CASES = [
    Case("one pod, within the limit, by a tenant", ONE_DEVICE, "NoExecute", "bob", (), True),
    Case("three pods by a tenant", NODE_A, "NoExecute", "bob", (), False, ("spec.taint.effect",)),
    Case("three pods by a listed user", NODE_A, "NoExecute", "alice", (), True),
    Case("three pods by a listed group", NODE_A, "NoExecute", "bob", ("gpu-operators",), True),
    Case("a group named like the user", NODE_A, "NoExecute", "gpu-operators", (), False,
         ("spec.taint.effect",)),
    Case("three pods kept off, not evicted", NODE_A, "NoSchedule", "bob", (), True),
    Case("three pods marked", NODE_A, "None", "bob", (), True),
    Case("every device by a listed user", {}, "NoExecute", "alice", (), False,
         ("spec.deviceSelector",)),
    Case("every device by a tenant", {}, "NoExecute", "bob", (), False,
         ("spec.deviceSelector", "spec.taint.effect")),
    Case("every device kept off by a listed user", {}, "NoSchedule", "alice", (), False,
         ("spec.deviceSelector",)),
    Case("every device marked by a tenant", {}, "None", "bob", (), True),
    Case("no selector by a tenant: nothing", None, "NoExecute", "bob", (), True),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_who_may_write_which_rule(guarded: Pipeline, case: Case) -> None:
    decision = _review(guarded, t.rule("r", case.selector, case.effect), case.user, case.groups)
    assert decision.allowed is case.allowed, decision.message
    assert decision.warnings  # the reach is said whatever the verdict
    if not case.allowed:
        assert decision.code == 403
        assert f"user {case.user} may not write this rule" in decision.message
        assert "policy deviceTaints" in decision.message
        assert decision.message.endswith("To get access: ask in #gpu-platform.")
        for path in case.paths:
            assert f"- {path}: " in decision.message
        assert decision.denied_by == ("device-taints",)


def test_the_denial_names_the_count_and_the_policy(guarded: Pipeline) -> None:
    decision = _review(guarded, t.rule("r", NODE_A), "bob")
    assert (
        "- spec.taint.effect: NoExecute would evict 3 pods in 1 namespace: ml-a (3: a-0, a-1, "
        "a-2): more than the 1 deviceTaints.maxEvictedPods allows"
    ) in decision.message


@pytest.mark.parametrize(("user", "allowed"), [("alice", True), ("bob", False)])
def test_an_allowed_empty_selector_is_for_the_listed_only(
    empty_allowed: Pipeline, user: str, allowed: bool
) -> None:
    decision = _review(empty_allowed, t.rule("r", {}, "NoSchedule"), user)
    assert decision.allowed is allowed


def test_an_update_that_changes_neither_selector_nor_taint_is_not_denied(guarded: Pipeline) -> None:
    old = t.rule("r", NODE_A)
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"reason": "maintenance"}
    decision = _review(guarded, new, "bob", operation="UPDATE", old=old)
    assert decision.allowed and decision.warnings
    widened = t.rule("r", NODE_A)
    decision = _review(guarded, widened, "bob", operation="UPDATE", old=t.rule("r", ONE_DEVICE))
    assert not decision.allowed


def test_a_dry_run_gets_the_same_answer(guarded: Pipeline) -> None:
    assert not _review(guarded, t.rule("r", NODE_A), "bob", dry_run=True).allowed


def test_warnings_off_and_guard_off_say_and_deny_nothing() -> None:
    decision = _review(_pipeline("deviceTaints: {warnings: false}\n"), t.rule("r", {}))
    assert decision.allowed and decision.warnings == ()


@pytest.mark.parametrize("version", ["v1alpha3", "v1beta2", "v1"])
def test_every_version_is_judged(guarded: Pipeline, version: str) -> None:
    assert not _review(guarded, t.rule("r", NODE_A, version=version), "bob").allowed


def test_a_selector_that_does_not_compile_is_denied_with_its_position() -> None:
    obj = t.rule("r", {"selectors": [{"cel": {"expression": "device.("}}]}, version="v1alpha3")
    decision = _review(_pipeline(), obj)
    assert not decision.allowed
    assert "spec.deviceSelector.selectors[0].cel.expression: CEL does not compile" in (
        decision.message
    )


def test_a_malformed_rule_is_denied_with_the_field_path() -> None:
    obj = t.rule("r", {"pool": ["node-a"]})
    decision = _review(_pipeline(), obj)
    assert not decision.allowed and decision.code == 422
    assert "spec.deviceSelector.pool: must be a string" in decision.message


values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 50) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
SEEDS = [
    t.rule("a", ONE_DEVICE),
    t.rule("b", {}, "NoSchedule"),
    t.rule("c", {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": "true"}}]},
           version="v1alpha3"),
]  # fmt: skip


@pytest.fixture(scope="module")
def fuzzed() -> Pipeline:
    return _pipeline(GUARDED)


@given(st.sampled_from(range(len(SEEDS))), st.data(), values)
def test_any_value_anywhere_in_a_rule_is_answered_never_with_an_internal_error(
    fuzzed: Pipeline, seed: int, data: st.DataObject, value: Any
) -> None:
    obj = copy.deepcopy(SEEDS[seed])
    where = data.draw(st.sampled_from([p for p in json_paths(obj) if p and p[0] == "spec"]))
    node = obj
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    decision = _review(fuzzed, obj, "bob")
    assert "internal-error" not in decision.denied_by
    assert decision.failed_checks == ()
    if not decision.allowed:
        assert decision.code in (403, 422), decision
        if decision.code == 422:
            assert "DeviceTaintRule" in decision.message and ": " in decision.message
