"""Policy exceptions (policy `exceptions`) in dra-only, audit and translate namespaces, through
the pipeline with an injected clock: the shared table of tests/dra_only_cases.py, which the
chart's admission policy and the real control plane also run."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
import pytest
import yaml

from app.config.policy import Policy
from app.errors import PolicyError
from app.pipeline import Decision, Endpoint, Pipeline
from app.policies.exceptions import pod_labels
from app.transport.review import decode_review
from tests.dra_only_cases import (
    EXCEPTION_CASES,
    EXCEPTIONS,
    GPU,
    WORKLOADS,
    ExceptionCase,
    container,
)
from tests.helpers import make_view, namespace, policy_from, wrap
from tests.specs import pod_spec

Obj = dict[str, Any]
END = dt.datetime(3000, 1, 1, tzinfo=dt.UTC)
"""The first instant after 2999-12-31, the end of the table's exceptions."""
SOME_DAY = dt.datetime(2026, 11, 24, 9, 30, tzinfo=dt.UTC)


def _policy(**extra: Any) -> Policy:
    return policy_from(yaml.safe_dump({"exceptions": EXCEPTIONS, **extra}))


def _clock(days_before_end: int | None) -> dt.datetime:
    """Mid-morning UTC of the day `days_before_end` before the end of 2999-12-31."""
    if days_before_end is None:
        return SOME_DAY
    return END - dt.timedelta(days=days_before_end + 1) + dt.timedelta(hours=9)


def _pipeline(now: dt.datetime, ns_labels: dict[str, str], mode: str, **extra: Any) -> Pipeline:
    view = make_view([namespace("team", mode, **ns_labels)])
    return Pipeline(_policy(**extra), view, "dra-webhook", clock=lambda: now)


def _object(kind: str, spec: Obj, labels: dict[str, str]) -> Obj:
    meta = {"name": "w", "namespace": "team"}
    if kind == "Pod":
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**meta, "labels": labels},
            "spec": spec,
        }
    ((api_version, _),) = [key for key in WORKLOADS if key[1] == kind]
    body = WORKLOADS[(api_version, kind)](spec)
    template = body["jobTemplate"]["spec"]["template"] if kind == "CronJob" else body["template"]
    template["metadata"] = {"labels": labels}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": body}


def _review(pipeline: Pipeline, obj: Obj, endpoint: Endpoint = Endpoint.VALIDATE) -> Decision:
    return pipeline.review(endpoint, decode_review(orjson.dumps(wrap(obj))))


TABLE = [(case, kind) for case in EXCEPTION_CASES for kind in case.kinds]


@pytest.mark.parametrize(("case", "kind"), TABLE, ids=[f"{k}: {c.id}" for c, k in TABLE])
def test_an_exception_allows_what_it_covers_until_its_date_in_a_dra_only_namespace(
    case: ExceptionCase, kind: str
) -> None:
    pipeline = _pipeline(_clock(case.days_before_end), case.namespace_labels, "dra-only")
    decision = _review(pipeline, _object(kind, case.spec, case.labels))
    assert decision.allowed is not bool(case.offences), decision.message
    for offence in case.offences:
        assert f" {offence.container} asks for {offence.resource}: " in decision.message
    if case.offences and case.excepted:
        assert "warmup asks" not in decision.message  # what an exception covers is not listed
    for text in case.warns:
        assert any(text in w for w in decision.warnings), (text, decision.warnings)
    if not case.selected:
        assert not decision.warnings
    assert decision.excepted == ((("dra-only", case.excepted),) if case.excepted else ())


def test_the_warning_counts_the_days_left_from_14_days_before_the_end() -> None:
    seen = {}
    for days in (20, 15, 14, 13, 2, 1, 0):
        pipeline = _pipeline(_clock(days), {"exceptions": "allowed"}, "dra-only")
        pod = _object("Pod", {"containers": [container("cuda", limits={GPU: "1"})]}, {})
        pod["metadata"]["labels"] = {"exception": "vendor"}
        (warning,) = _review(pipeline, pod).warnings
        seen[days] = warning.split("(end of day UTC", 1)[1].split(")", 1)[0]
    assert seen == {
        20: "",
        15: "",
        14: ", 14 days left",
        13: ", 13 days left",
        2: ", 2 days left",
        1: ", 1 day left",
        0: ", its last day",
    }


@pytest.mark.parametrize(
    ("now", "applies"),
    [
        (dt.datetime(2999, 12, 31, 23, 59, 59, tzinfo=dt.UTC), True),
        (dt.datetime(3000, 1, 1, 0, 0, 0, tzinfo=dt.UTC), False),
        # 2999-12-31 23:30 in New York is already 3000-01-01 in UTC: the day is UTC's
        (dt.datetime(2999, 12, 31, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5))), False),
        (dt.datetime(3000, 1, 1, 0, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))), True),
    ],
)
def test_until_includes_its_whole_day_in_utc(now: dt.datetime, applies: bool) -> None:
    pipeline = _pipeline(now, {"exceptions": "allowed"}, "dra-only")
    pod = _object("Pod", {"containers": [container("cuda", limits={GPU: "1"})]}, {})
    pod["metadata"]["labels"] = {"exception": "vendor"}
    assert _review(pipeline, pod).allowed is applies


def test_in_audit_namespaces_covered_requests_are_not_findings() -> None:
    pipeline = _pipeline(SOME_DAY, {"exceptions": "allowed"}, "audit")
    spec = {
        "containers": [container("cuda", limits={GPU: "1"})],
        "initContainers": [container("warmup", limits={GPU: "1"})],
    }
    decision = _review(pipeline, _object("Pod", spec, {"exception": "warmup"}))
    assert decision.allowed and decision.findings == 1
    assert any("would be allowed in a dra-only namespace" in w for w in decision.warnings)
    assert any("container cuda asks for" in w for w in decision.warnings)
    assert decision.excepted == (("dra-only", "warmup-only"),)


def test_an_expired_exception_is_named_in_the_denial() -> None:
    pipeline = _pipeline(SOME_DAY, {"exceptions": "allowed"}, "dra-only")
    decision = _review(
        pipeline,
        _object("Pod", {"containers": [container("c", limits={GPU: "1"})]}, {"exception": "ended"}),
    )
    assert not decision.allowed
    assert "exception ended ended 2020-01-31 (end of day UTC) no longer applies" in decision.message


def test_an_object_an_exception_does_not_select_keeps_the_memoized_denial() -> None:
    pipeline = _pipeline(SOME_DAY, {"exceptions": "allowed"}, "dra-only")
    obj = _object("Pod", {"containers": [container("c", limits={GPU: "1"})]}, {"app": "x"})
    first, second = _review(pipeline, obj), _review(pipeline, obj)
    assert not first.allowed and first is second


def test_a_workload_is_selected_by_its_pod_template_labels_not_its_own() -> None:
    obj = _object("Deployment", {"containers": [container("c", limits={GPU: "1"})]}, {})
    obj["metadata"]["labels"] = {"exception": "vendor"}  # on the Deployment only
    pipeline = _pipeline(SOME_DAY, {"exceptions": "allowed"}, "dra-only")
    assert not _review(pipeline, obj).allowed
    spec = pod_spec("Deployment", obj)
    assert spec is not None
    assert pod_labels(spec) == {}
    pod = pod_spec("Pod", {"metadata": {"labels": {"a": "b", "n": 1}}, "spec": {}})
    assert pod is not None
    assert pod_labels(pod) == {"a": "b"}


# -- translate namespaces ---------------------------------------------------------------------


def _translate(labels: dict[str, str], spec: Obj, now: dt.datetime = SOME_DAY) -> Decision:
    pipeline = _pipeline(now, {"exceptions": "allowed"}, "translate")
    return _review(pipeline, _object("Pod", spec, labels), Endpoint.MUTATE)


LEGACY = {"containers": [container("cuda", limits={GPU: "2"})]}


def test_an_excepted_pod_is_left_untranslated_with_the_warning() -> None:
    decision = _translate({"exception": "vendor"}, LEGACY)
    assert decision.allowed and not decision.patch and not decision.templates
    (warning,) = decision.warnings
    assert warning.startswith("exception vendor-image until 2999-12-31 (end of day UTC): ")
    assert "left untranslated; reason: vendor image" in warning
    assert decision.excepted == (("translate", "vendor-image"),)


@pytest.mark.parametrize(
    ("labels", "now", "note"),
    [
        ({"exception": "other"}, SOME_DAY, None),
        ({"exception": "ended"}, SOME_DAY, "exception ended ended 2020-01-31"),
        ({"exception": "vendor"}, END, "exception vendor-image ended 2999-12-31"),
    ],
    ids=["not matching", "expired", "the day after until"],
)
def test_a_pod_no_active_exception_covers_is_translated(
    labels: dict[str, str], now: dt.datetime, note: str | None
) -> None:
    decision = _translate(labels, LEGACY, now)
    assert decision.allowed and decision.patch and decision.templates
    assert decision.excepted == ()
    if note:
        assert any(note in w for w in decision.warnings), decision.warnings


def test_14_days_before_the_end_the_untranslated_pod_is_told_the_days_left() -> None:
    decision = _translate({"exception": "vendor"}, LEGACY, _clock(14))
    assert not decision.patch
    assert "(end of day UTC, 14 days left)" in decision.warnings[0]


def test_an_exception_covering_some_containers_leaves_the_pod_translated_whole() -> None:
    spec = {
        "containers": [container("cuda", limits={GPU: "2"})],
        "initContainers": [container("warmup", limits={GPU: "1"})],
    }
    decision = _translate({"exception": "warmup"}, spec)
    assert decision.patch and decision.excepted == ()
    assert any(
        "exception warmup-only until 2999-12-31 (end of day UTC) does not cover container(s) "
        "cuda: the pod is translated as a whole" in w
        for w in decision.warnings
    )
    only_warmup = _translate({"exception": "warmup"}, {**spec, "containers": [container("c")]})
    assert not only_warmup.patch and only_warmup.excepted == (("translate", "warmup-only"),)


def test_an_excepted_workload_is_not_validated_for_translation() -> None:
    pipeline = _pipeline(SOME_DAY, {"exceptions": "allowed"}, "translate")
    spec = {"containers": [container("x", limits={"habana.ai/gaudi": "1"})]}  # no mapping
    assert not _review(pipeline, _object("Deployment", spec, {"exception": "other"})).allowed
    decision = _review(pipeline, _object("Deployment", spec, {"exception": "vendor"}))
    assert decision.allowed and decision.excepted == (("translate-validate", "vendor-image"),)


# -- the policy file ----------------------------------------------------------------------------


def _one(**fields: Any) -> str:
    entry = {
        "name": "vendor",
        "objectSelector": {"matchLabels": {"app": "v"}},
        "until": "2027-01-31",
        "reason": "r",
        **fields,
    }
    return yaml.safe_dump({"exceptions": [entry]})


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"until": "2027-02-30"}, "exceptions.0.until: Value error, '2027-02-30' is not a date"),
        (
            {"until": "31.01.2027"},
            "exceptions.0.until: Value error, '31.01.2027' is not a date written YYYY-MM-DD",
        ),
        ({"until": 20270131}, "exceptions.0.until: Value error, 20270131 is not a date"),
        ({"until": "2027-01-31T00:00:00Z"}, "exceptions.0.until: Value error"),
        ({"name": "Vendor_X"}, "exceptions.0.name: Value error, 'Vendor_X' must be lower-case"),
        ({"reason": ""}, "exceptions.0.reason: String should have at least 1 character"),
        ({"kinds": ["Service"]}, "exceptions.0.kinds.0: Input should be 'Pod'"),
        ({"containers": ["Bad Name"]}, "exceptions.0.containers: Value error, 'Bad Name' is not"),
        (
            {"objectSelector": {}},
            "exceptions.0: Value error, exception 'vendor' selects every object",
        ),
        ({"labels": {"a": "b"}}, "unknown key `labels` under `exceptions.0`"),
        (
            {"objectSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
            "exceptions.0.objectSelector.matchExpressions.0: Value error, values must not be empty",
        ),
    ],
)
def test_a_bad_exception_stops_startup_naming_the_key(fields: Obj, error: str) -> None:
    with pytest.raises(PolicyError) as raised:
        policy_from(_one(**fields))
    assert error in str(raised.value)


def test_exception_names_are_unique_and_few() -> None:
    entry = yaml.safe_load(_one())["exceptions"][0]
    with pytest.raises(
        PolicyError, match="exceptions: Value error, exception name 'vendor' is used twice"
    ):
        policy_from(yaml.safe_dump({"exceptions": [entry, entry]}))
    many = [{**entry, "name": f"e{i}"} for i in range(51)]
    with pytest.raises(PolicyError, match="at most 50 exceptions"):
        policy_from(yaml.safe_dump({"exceptions": many}))


def test_an_unquoted_date_is_read_as_the_date() -> None:
    policy = policy_from(_one().replace("'2027-01-31'", "2027-01-31"))
    assert policy.exceptions[0].until == dt.date(2027, 1, 31)
