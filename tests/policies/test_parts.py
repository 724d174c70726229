"""Parts: what registrations build from the policy at load, each once, read-only afterwards."""

from __future__ import annotations

from typing import Any

import pytest

from app.cluster.view import ClusterReader, ClusterView, Kind, Listener
from app.pipeline import Endpoint, Pipeline, Registration
from app.policies.base import ALLOW
from app.policies.parts import Parts
from tests.helpers import namespace, policy_from

Obj = dict[str, Any]

POLICY = policy_from("{}")


def test_a_part_is_built_once_however_many_ask_for_it() -> None:
    calls: list[str] = []

    def base(parts: Parts) -> list[str]:
        calls.append("base")
        return calls

    def on_top(parts: Parts) -> int:
        return len(parts.build(base))

    parts = Parts(POLICY)
    assert parts.build(on_top) == 1
    assert parts.build(base) is calls
    assert parts.build(on_top) == 1
    assert calls == ["base"]
    assert parts.built() == (base, on_top)


def test_a_part_is_read_with_get_after_it_was_built() -> None:
    def answer(parts: Parts) -> int:
        return 42

    parts = Parts(POLICY)
    parts.build(answer)
    parts.seal()
    assert parts[answer] == 42
    assert answer in parts


def test_reading_a_part_nobody_declared_raises_a_lookup_error_naming_it() -> None:
    def undeclared(parts: Parts) -> int:
        return 1

    with pytest.raises(LookupError, match=r"undeclared was not built at load: declare it"):
        Parts(POLICY).get(undeclared)


def test_nothing_is_built_once_the_parts_are_sealed() -> None:
    def late(parts: Parts) -> int:
        return 1

    parts = Parts(POLICY)
    parts.seal()
    with pytest.raises(RuntimeError, match="built at load, not on a request"):
        parts.build(late)
    assert late not in parts


def test_parts_that_need_each_other_in_a_circle_are_refused_with_the_chain() -> None:
    def first(parts: Parts) -> int:
        return parts.build(second)

    def second(parts: Parts) -> int:
        return parts.build(first)

    with pytest.raises(RuntimeError, match=r"in a circle: .*first -> .*second -> .*first"):
        Parts(POLICY).build(first)


def test_a_builder_reads_the_policy_it_was_given() -> None:
    def label(parts: Parts) -> str:
        return parts.policy.namespace_modes.label

    assert Parts(policy_from("namespaceModes: {label: mode}")).build(label) == "mode"


class _Follower:
    """A part that follows the view: records what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def listeners(self) -> tuple[Listener, ...]:
        return (self._first, self._second)

    def _first(self, kind: Kind, old: Obj | None, new: Obj | None) -> None:
        self.events.append(("first", (new or old or {}).get("metadata", {}).get("name", "")))

    def _second(self, kind: Kind, old: Obj | None, new: Obj | None) -> None:
        self.events.append(("second", (new or old or {}).get("metadata", {}).get("name", "")))

    def synced(self, view: ClusterReader) -> None:
        ready = view.synced_kinds() == frozenset(Kind)
        self.events.append(("synced", "after ready" if ready else "before ready"))


def test_a_part_that_follows_the_view_is_subscribed_at_load_and_told_when_it_has_synced() -> None:
    def follower(parts: Parts) -> _Follower:
        return _Follower()

    reg = Registration(
        "follows",
        Endpoint.VALIDATE,
        frozenset({("", "Pod")}),
        frozenset({"CREATE"}),
        lambda request, ctx: ALLOW,
        builds=(follower,),
    )
    view = ClusterView()
    view.apply(Kind.NAMESPACE, namespace("before", "audit"))
    pipeline = Pipeline(POLICY, view, own_namespace="dra-webhook", registrations=(reg,))
    part = pipeline.parts[follower]
    assert pipeline.parts.following_view() == (part,)
    # replayed the view to each listener in order, then told of changes; synced once, at sync
    assert part.events == [("first", "before"), ("second", "before")]
    for kind in Kind:
        view.replace(kind, [namespace("after", "audit")] if kind is Kind.NAMESPACE else [])
    assert part.events[2:] == [
        ("first", "before"),
        ("second", "before"),
        ("first", "after"),
        ("second", "after"),
        ("synced", "before ready"),
    ]
