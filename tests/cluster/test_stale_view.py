"""What checks do while the cluster view of a kind they read is stale (failure.staleView)."""

from __future__ import annotations

import orjson
import pytest

from app.cluster.view import Kind
from app.config import Policy, load_policy
from app.errors import PolicyError
from app.pipeline import REGISTRATIONS, Decision, Endpoint, Pipeline, Registration
from app.policies.base import Context, Request, Result
from app.transport.review import decode_review
from tests.helpers import make_pipeline, make_view, policy_from, review

LEGACY_POD = "pod-create-legacy-gpu"  # a pod asking for nvidia.com/gpu in gpu-e2e (dra-only)
DRA_ONLY = tuple(reg for reg in REGISTRATIONS if reg.name == "dra-only")


def dra_only_pipeline(policy: Policy | None = None) -> Pipeline:
    """The pipeline with the dra-only check alone (other checks see pods too)."""
    return Pipeline(policy or load_policy(), make_view(), "dra-webhook", DRA_ONLY)


def decide(pipeline: Pipeline, name: str = LEGACY_POD) -> Decision:
    request = decode_review(orjson.dumps(review(name)))
    return pipeline.review(Endpoint.VALIDATE, request)


def test_a_fresh_view_denies_the_legacy_pod_in_a_dra_only_namespace() -> None:
    decision = decide(dra_only_pipeline())
    assert not decision.allowed
    assert decision.code == 403


@pytest.mark.parametrize("stale", [Kind.NAMESPACE, Kind.DEVICE_CLASS])
def test_a_stale_kind_the_check_reads_skips_it_with_a_warning_by_default(stale: Kind) -> None:
    pipeline = dra_only_pipeline()
    pipeline.view.mark_stale(stale)
    decision = decide(pipeline)
    assert decision.allowed
    (warning,) = decision.warnings
    assert warning.startswith(f"dra-only: dra-webhook's cluster view of {stale.value} is out")
    assert warning.endswith("not checked, allowed (fail open)")


def test_a_check_configured_closed_denies_with_503_naming_the_stale_kinds() -> None:
    policy = policy_from("failure:\n  staleView:\n    checks:\n      dra-only: closed\n")
    pipeline = dra_only_pipeline(policy)
    pipeline.view.mark_stale(Kind.DEVICE_CLASS)
    pipeline.view.mark_stale(Kind.NAMESPACE)
    decision = decide(pipeline)
    assert not decision.allowed
    assert (decision.code, decision.reason) == (503, "ServiceUnavailable")
    assert "cluster view of DeviceClass, Namespace is out of date" in decision.message
    assert "denied (fail closed), retry later" in decision.message
    assert decision.denied_by == ("dra-only",)


def test_the_default_mode_closed_applies_to_every_check() -> None:
    pipeline = dra_only_pipeline(policy_from("failure: {staleView: {default: closed}}"))
    pipeline.view.mark_stale(Kind.NAMESPACE)
    assert decide(pipeline).code == 503


def test_a_stale_kind_the_check_does_not_read_changes_nothing() -> None:
    pipeline = dra_only_pipeline(policy_from("failure: {staleView: {default: closed}}"))
    pipeline.view.mark_stale(Kind.RESOURCE_SLICE)
    pipeline.view.mark_stale(Kind.RESOURCE_QUOTA)
    decision = decide(pipeline)
    assert not decision.allowed
    assert decision.code == 403  # dra-only ran on the view and denied as usual
    assert not decision.warnings


def _quota_like(request: Request, ctx: Context) -> Result:
    return Result(warnings=("checked",))


def test_a_check_that_declares_no_reads_is_affected_by_any_stale_kind() -> None:
    registration = Registration(
        "reads-everything",
        Endpoint.VALIDATE,
        frozenset({("", "Pod")}),
        frozenset({"CREATE"}),
        _quota_like,
    )
    pipeline = Pipeline(load_policy(), make_view(), "dra-webhook", (registration,))
    assert decide(pipeline).warnings == ("checked",)
    pipeline.view.mark_stale(Kind.RESOURCE_SLICE)
    (warning,) = decide(pipeline).warnings
    assert "reads-everything: dra-webhook's cluster view of ResourceSlice" in warning
    pipeline.view.mark_fresh(Kind.RESOURCE_SLICE)
    assert decide(pipeline).warnings == ("checked",)


def test_a_stale_view_policy_naming_an_unknown_check_fails_at_startup() -> None:
    policy = policy_from("failure: {staleView: {checks: {dra-olny: closed}}}")
    with pytest.raises(PolicyError, match=r"failure.staleView.checks.dra-olny: no such check"):
        make_pipeline(policy=policy)


def test_a_stale_view_mode_other_than_open_or_closed_is_refused_with_its_key() -> None:
    with pytest.raises(PolicyError, match=r"failure.staleView.checks.dra-only"):
        policy_from("failure: {staleView: {checks: {dra-only: sometimes}}}")


def test_every_check_of_a_real_pipeline_says_it_was_skipped_on_a_stale_namespace_view() -> None:
    pipeline = make_pipeline()
    pipeline.view.mark_stale(Kind.NAMESPACE)
    decision = decide(pipeline)
    assert decision.allowed
    assert len(decision.warnings) == len(decision.policies)
    assert all("not checked, allowed (fail open)" in w for w in decision.warnings)
