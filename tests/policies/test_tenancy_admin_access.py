"""The admin-access guard (policy `adminAccess`): the namespace label that turns DRA admin access
on changes only by a listed user or group, and claims ask for admin access only where the
policy's namespaceSelector allows it."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from app.bounded import live_caches
from app.config.policy import Policy
from app.errors import PolicyError, ReviewError
from app.pipeline import Endpoint, Pipeline
from app.transport.review import decode_review
from app.verdict import Decision
from tests.helpers import AppHarness, load_fixture, make_pipeline, namespace, policy_from, wrap
from tests.tenancy_cases import ADMIN_ACCESS, LABEL, LABEL_CHANGES, LABEL_PATH, LabelChange

Obj = dict[str, Any]
POLICY = yaml.safe_dump({"adminAccess": ADMIN_ACCESS})

NAMESPACES = [
    namespace("team-a", "dra-only", team="a"),
    namespace("team-b", "dra-only", team="b", **{LABEL: "true"}),
    namespace("monitoring", "dra-only", tier="ops", **{LABEL: "true"}),
]


def _ns(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _review(
    pipeline: Pipeline,
    obj: Obj,
    *,
    old: Obj | None = None,
    user: str = "mallory",
    groups: list[str] | None = None,
    dry_run: bool = False,
) -> Decision:
    body = wrap(obj, operation="UPDATE" if old is not None else "CREATE", old=old, dry_run=dry_run)
    body["request"]["userInfo"] = {"username": user, "groups": groups or ["system:authenticated"]}
    if obj["kind"] == "Namespace":
        # as the API server sends it (tests/fixtures): the namespace itself is the request's
        # namespace, on CREATE too, when the view cannot know it yet
        body["request"]["namespace"] = obj["metadata"]["name"]
    return pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(body)))


@pytest.fixture(autouse=True, scope="module")
def _release_memos() -> Iterator[None]:
    """The pipelines made here memoize their decisions against the process-wide cache budget
    (app.bounded), and may outlive the module: empty the caches made here when it is done, so
    the tests after it start from the budget they expect."""
    before = {id(cache) for cache in live_caches()}
    yield
    for cache in live_caches():
        if id(cache) not in before:
            cache.clear()


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    return make_pipeline(NAMESPACES, policy_from(POLICY))


# -- the namespace label ---------------------------------------------------------------------


@pytest.mark.parametrize("case", LABEL_CHANGES, ids=[c.id for c in LABEL_CHANGES])
def test_the_admin_access_label_changes_only_by_a_listed_user_or_group(
    pipeline: Pipeline, case: LabelChange
) -> None:
    name = "team-a" if case.old is not None else "new-team"
    decision = _review(
        pipeline,
        _ns(name, **case.new),
        old=_ns(name, **case.old) if case.old is not None else None,
        user=case.user,
        groups=list(case.groups),
    )
    assert decision.allowed is case.allowed, decision.message
    if not case.allowed:
        assert decision.code == 403 and decision.denied_by == ("admin-access",)
        said = f"user {case.user} may not set, change or remove the label {LABEL}"
        assert said in decision.message
        assert "dra-webhook admin-access guard, policy adminAccess" in decision.message
        assert f"- {LABEL_PATH}: {case.said}" in decision.message
        assert "To get access: file a ticket in the PLATFORM queue." in decision.message


def test_the_denial_says_what_the_change_was(pipeline: Pipeline) -> None:
    said = {
        "set": _review(pipeline, _ns("team-a", **{LABEL: "true"}), old=_ns("team-a")),
        "changed": _review(
            pipeline, _ns("team-a", **{LABEL: "true"}), old=_ns("team-a", **{LABEL: "false"})
        ),
        "removed": _review(pipeline, _ns("team-a"), old=_ns("team-a", **{LABEL: "true"})),
    }
    assert f'{LABEL_PATH}: set to "true" (it was not set)' in said["set"].message
    assert f'{LABEL_PATH}: changed from "false" to "true"' in said["changed"].message
    assert f'{LABEL_PATH}: removed (it was "true")' in said["removed"].message


def test_a_dry_run_gets_the_same_denial(pipeline: Pipeline) -> None:
    wet = _review(pipeline, _ns("team-a", **{LABEL: "true"}), old=_ns("team-a"))
    dry = _review(pipeline, _ns("team-a", **{LABEL: "true"}), old=_ns("team-a"), dry_run=True)
    assert not dry.allowed and dry.message == wet.message


def test_with_the_guard_off_anyone_may_change_the_label() -> None:
    pipeline = make_pipeline(NAMESPACES)
    assert _review(pipeline, _ns("team-a", **{LABEL: "true"}), old=_ns("team-a")).allowed


def test_with_nobody_listed_nobody_may_change_it_through_the_webhook() -> None:
    pipeline = make_pipeline(NAMESPACES, policy_from("adminAccess: {enabled: true}"))
    decision = _review(pipeline, _ns("team-a", **{LABEL: "true"}), old=_ns("team-a"), user="alice")
    assert not decision.allowed
    assert "adminAccess.users or adminAccess.groups" in decision.message  # the default way in


MALFORMED = [
    ("labels a list", {"name": "team-a", "labels": [LABEL]}, "metadata.labels: must be an object"),
    ("label a number", {"name": "team-a", "labels": {LABEL: 1}}, f"{LABEL_PATH}: must be a string"),
    ("metadata a string", "team-a", "metadata: must be an object"),
]


@pytest.mark.parametrize(("case", "meta", "said"), MALFORMED, ids=[row[0] for row in MALFORMED])
def test_a_malformed_namespace_is_denied_with_the_field_path(
    pipeline: Pipeline, case: str, meta: Any, said: str
) -> None:
    body = wrap(_ns("team-a"), operation="UPDATE", old=_ns("team-a"))
    body["request"].update(name="team-a", namespace="team-a")
    body["request"]["object"]["metadata"] = meta
    decision = pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(body)))
    assert not decision.allowed and decision.code == 422, decision
    assert said in decision.message


def test_a_user_or_group_the_admission_policy_cannot_quote_is_refused_at_load() -> None:
    with pytest.raises(PolicyError, match=r"adminAccess\.users"):
        policy_from('adminAccess: {enabled: true, users: ["o\'brien"]}')


# Any sequence of namespace writes by a user the policy does not list leaves the label as it
# was: every write that would change it is denied, and the API server keeps the stored object.
VALUES = st.sampled_from(["true", "false", "", "TRUE", "yes"])
LABEL_EDITS = st.one_of(
    st.tuples(st.just("set"), VALUES),
    st.tuples(st.just("remove"), st.none()),
    st.tuples(st.just("other"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("drop-labels"), st.none()),
)


def _edited(current: Obj, edit: tuple[str, str | None]) -> Obj:
    obj = copy.deepcopy(current)
    labels = obj["metadata"].setdefault("labels", {})
    what, value = edit
    if what == "set":
        labels[LABEL] = value
    elif what == "remove":
        labels.pop(LABEL, None)
    elif what == "other":
        labels["note"] = value
    else:
        del obj["metadata"]["labels"]
    return obj


@settings(max_examples=150, deadline=None)
@given(
    start=st.one_of(st.none(), VALUES),
    edits=st.lists(LABEL_EDITS, max_size=8),
    groups=st.lists(st.sampled_from(["dev", "system:authenticated", "platform"]), max_size=3),
)
def test_no_sequence_of_updates_by_an_unlisted_user_changes_the_label(
    pipeline: Pipeline, start: str | None, edits: list[tuple[str, str | None]], groups: list[str]
) -> None:
    stored = _ns("team-a", **({LABEL: start} if start is not None else {}))
    for edit in edits:
        wanted = _edited(stored, edit)
        if _review(pipeline, wanted, old=stored, user="mallory", groups=groups).allowed:
            stored = wanted
    labels = stored["metadata"].get("labels") or {}
    assert labels.get(LABEL) == start


@pytest.mark.parametrize(
    ("fixture", "allowed"),
    [("namespace-create-admin-access", True), ("namespace-update-admin-access", False)],
)
def test_the_captured_reviews_are_judged_by_who_sent_them(fixture: str, allowed: bool) -> None:
    """The API server names the new namespace as the request's namespace on CREATE: the guard
    judges the object, never "namespace not in the view" (e2e-admin is listed for CREATE)."""
    policy = policy_from("adminAccess: {enabled: true, groups: [team-b-admins]}")
    body = load_fixture(fixture)
    if allowed:
        body["request"]["userInfo"]["groups"].append("team-b-admins")
    pipeline = make_pipeline(NAMESPACES, policy)
    decision = pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(body)))
    assert decision.allowed is allowed, decision.message
    if not allowed:
        assert decision.denied_by == ("admin-access",)
        assert "user e2e-admin may not set" in decision.message


# -- claims asking for admin access ----------------------------------------------------------


def _claim(ns: str, *requests: Obj, kind: str = "ResourceClaim") -> Obj:
    spec = {"devices": {"requests": list(requests)}}
    meta = {"name": "debug", "namespace": ns}
    if kind == "ResourceClaimTemplate":
        spec = {"spec": spec}
    return {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": meta, "spec": spec}


def _exactly(device_class: str = "gpu.nvidia.com", **more: Any) -> Obj:
    return {"name": "gpus", "exactly": {"deviceClassName": device_class, **more}}


CLAIMS: list[tuple[str, Obj, bool, str]] = [
    (
        "admin access where the label is but the policy does not select",
        _claim("team-b", _exactly(adminAccess=True)),
        False,
        "spec.devices.requests[0].exactly.adminAccess: asks for admin access to every device "
        "of DeviceClass gpu.nvidia.com",
    ),
    (
        "a template asking for it",
        _claim("team-b", _exactly(adminAccess=True), kind="ResourceClaimTemplate"),
        False,
        "spec.spec.devices.requests[0].exactly.adminAccess",
    ),
    (
        "the second request asking for it",
        _claim("team-a", _exactly(), {**_exactly(adminAccess=True), "name": "all"}),
        False,
        "spec.devices.requests[1].exactly.adminAccess",
    ),
    (
        "a v1beta1 request asking for it",
        _claim("team-b", {"name": "r", "deviceClassName": "gpu.nvidia.com", "adminAccess": True}),
        False,
        "spec.devices.requests[0].adminAccess",
    ),
    (
        "admin access where the policy selects",
        _claim("monitoring", _exactly(adminAccess=True)),
        True,
        "",
    ),
    ("adminAccess: false", _claim("team-b", _exactly(adminAccess=False)), True, ""),
    ("no admin access", _claim("team-b", _exactly()), True, ""),
]


@pytest.mark.parametrize(
    ("case", "claim", "allowed", "said"), CLAIMS, ids=[row[0] for row in CLAIMS]
)
def test_claims_ask_for_admin_access_only_where_the_policy_selects(
    pipeline: Pipeline, case: str, claim: Obj, allowed: bool, said: str
) -> None:
    decision = _review(pipeline, claim)
    assert decision.allowed is allowed, decision.message
    if not allowed:
        assert decision.denied_by == ("admin-access-claims",)
        assert said in decision.message
        assert "adminAccess.namespaceSelector (tier=ops) does not select it" in decision.message


def test_the_denial_says_the_label_alone_is_not_enough(pipeline: Pipeline) -> None:
    decision = _review(pipeline, _claim("team-b", _exactly(adminAccess=True)))
    assert f"even though it is labelled {LABEL}=true" in decision.message


def test_without_a_namespace_selector_claims_are_left_to_kubernetes() -> None:
    pipeline = make_pipeline(NAMESPACES, policy_from("adminAccess: {enabled: true}"))
    assert _review(pipeline, _claim("team-b", _exactly(adminAccess=True))).allowed


def test_a_malformed_admin_access_is_denied_with_its_path(pipeline: Pipeline) -> None:
    decision = _review(pipeline, _claim("team-b", _exactly(adminAccess="yes")))
    assert not decision.allowed and decision.code == 422
    assert "spec.devices.requests[0].exactly.adminAccess: must be a boolean" in decision.message


# -- on the wire and in the metrics ----------------------------------------------------------


def test_denials_are_counted_by_check_and_the_namespace_kind_keeps_its_label(
    make_app: Callable[..., AppHarness],
) -> None:
    app = make_app(NAMESPACES, policy_from(POLICY))
    body = wrap(_ns("team-a", **{LABEL: "true"}), operation="UPDATE", old=_ns("team-a"))
    body["request"]["userInfo"] = {"username": "mallory", "groups": ["system:authenticated"]}
    assert app.answer("validate", body)["allowed"] is False
    body["request"]["userInfo"]["groups"].append("platform-admins")
    assert app.answer("validate", body)["allowed"] is True
    claim = wrap(_claim("team-b", _exactly(adminAccess=True)))
    assert app.answer("validate", claim)["allowed"] is False
    text = app.client.get("/metrics").text
    assert 'dra_webhook_denials_total{reason="admin-access",webhook="validate"} 1.0' in text
    assert 'dra_webhook_denials_total{reason="admin-access-claims",webhook="validate"} 1.0' in text
    assert 'decision="denied",kind="Namespace"' in text


def test_the_groups_of_the_user_are_read_from_the_review() -> None:
    body = wrap(_ns("team-a"))
    body["request"]["userInfo"] = {"username": "bob", "groups": ["a", "b"]}
    assert decode_review(orjson.dumps(body)).groups == ("a", "b")
    body["request"]["userInfo"] = {"username": "bob"}
    assert decode_review(orjson.dumps(body)).groups == ()
    body["request"]["userInfo"] = {"username": "bob", "groups": ["a", 1]}
    with pytest.raises(ReviewError, match=r"userInfo\.groups"):
        decode_review(orjson.dumps(body))


def test_the_policy_section_is_off_by_default() -> None:
    assert Policy().admin_access.enabled is False
