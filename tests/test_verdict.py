"""One Decision from the checks' results: allowed or denied, every message kept and bounded,
the same Decision for the same shared results."""

from __future__ import annotations

import pytest

from app.bounded import DEFAULT_MAX_BYTES, set_budget
from app.cluster.provisioning import CREATED, DRY_RUN, EXISTED, Outcome, Status
from app.policies.base import ALLOW, Result, Violation
from app.verdict import (
    MAX_LISTED_VIOLATIONS,
    MAX_WARNING_CHARS,
    MAX_WARNINGS,
    Decision,
    Merger,
    merge,
    provisioned,
)


def test_merge_allows_and_concatenates_patches_and_warnings_in_order() -> None:
    op1 = {"op": "add", "path": "/a", "value": 1}
    op2 = {"op": "add", "path": "/b", "value": 2}
    decision = merge(
        [
            ("one", Result(patch=(op1,), warnings=("w1",), findings=1)),
            ("two", Result(patch=(op2,), warnings=("w2",), findings=2)),
        ]
    )
    assert decision.allowed
    assert decision.patch == (op1, op2)
    assert decision.warnings == ("w1", "w2")
    assert decision.findings == 3
    assert decision.policies == ("one", "two")
    assert decision.label == "patched"


def test_merge_denies_when_any_check_denies_and_keeps_every_denial_text_and_no_patch() -> None:
    op = {"op": "add", "path": "/a", "value": 1}
    first = Result(violations=(Violation("spec.x", "bad x"),), summary="first:", code=422)
    second = Result(violations=(Violation("", "bad y"),), details="fix: y", code=403)
    decision = merge([("a", first), ("p", Result(patch=(op,))), ("b", second)])
    assert not decision.allowed
    assert decision.code == 422  # the first denial's code and reason
    assert decision.message == "first:\n- spec.x: bad x\n- bad y\nfix: y"
    assert decision.denied_by == ("a", "b")
    assert decision.patch == ()
    assert decision.label == "denied"


def test_merge_labels_the_denial_of_a_check_that_failed() -> None:
    failed = Result(violations=(Violation("", "failed"),), code=500, reason="InternalError")
    decision = merge([("a", ALLOW), ("b", failed)], failed=("b",))
    assert decision.denied_by == ("internal-error:b",)
    assert decision.failed_checks == ("b",)


def test_merge_bounds_the_warnings_and_their_length() -> None:
    many = Result(warnings=tuple(f"w{i}" for i in range(MAX_WARNINGS + 5)))
    long = Result(warnings=("x" * (MAX_WARNING_CHARS + 10),))
    assert merge([("m", many)]).warnings[-1] == "... and 6 more warnings"
    assert len(merge([("m", many)]).warnings) == MAX_WARNINGS
    (cut,) = merge([("l", long)]).warnings
    assert len(cut) == MAX_WARNING_CHARS
    assert cut.endswith("...")


def test_merge_lists_at_most_the_bounded_number_of_violations() -> None:
    count = MAX_LISTED_VIOLATIONS + 3
    result = Result(violations=tuple(Violation(f"p{i}", "v") for i in range(count)))
    message = merge([("many", result)]).message
    assert message.count("\n- p") == MAX_LISTED_VIOLATIONS - 1
    assert message.endswith("- ... and 3 more")


def test_a_merger_returns_the_same_decision_for_the_same_shared_results() -> None:
    # (the memo's share of the process budget is shared by every live pipeline's merger: the
    # suite's other pipelines may hold it, so this test gives the share room of its own)
    set_budget(64 * DEFAULT_MAX_BYTES)
    try:
        _same_decision_for_the_same_shared_results()
    finally:
        set_budget(DEFAULT_MAX_BYTES)


def _same_decision_for_the_same_shared_results() -> None:
    merger = Merger()
    denial = Result(violations=(Violation("", "no"),))
    assert merger.merge([("a", denial)]) is merger.merge([("a", denial)])
    assert merger.merge([("a", denial)]) is not merger.merge([("b", denial)])
    assert merger.merge([("a", denial)]) == merge([("a", denial)])  # the same answer, remembered
    # its memos are its own: another pipeline's merger starts empty
    assert Merger().merge([("a", denial)]) is not merger.merge([("a", denial)])


TRANSLATED = Decision(allowed=True, patch=({"op": "add", "path": "/a", "value": 1},))


@pytest.mark.parametrize("outcome", [CREATED, EXISTED, DRY_RUN])
def test_a_decision_whose_templates_are_there_is_unchanged(outcome: Outcome) -> None:
    assert provisioned(TRANSLATED, outcome, "closed") is TRANSLATED


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_a_template_conflict_is_denied_whatever_the_failure_policy(mode: str) -> None:
    outcome = Outcome(Status.CONFLICT, "t", "ResourceClaimTemplate ns/t exists, but it differs")
    decision = provisioned(TRANSLATED, outcome, mode)  # type: ignore[arg-type]
    assert (decision.allowed, decision.code, decision.reason) == (False, 403, "Forbidden")
    assert decision.message.startswith("ResourceClaimTemplate ns/t exists, but it differs; ")
    assert decision.denied_by == ("template-conflict",) and not decision.patch


@pytest.mark.parametrize(
    ("status", "code", "reason", "tail"),
    [
        (Status.REFUSED, 403, "Forbidden", "denied (fail closed)"),
        (Status.FAILED, 500, "InternalError", "denied (fail closed), retry later"),
    ],
)
def test_a_failed_create_fails_closed_with_retry_later_only_where_a_retry_can_help(
    status: Status, code: int, reason: str, tail: str
) -> None:
    decision = provisioned(TRANSLATED, Outcome(status, "t", "the API said no"), "closed")
    assert (decision.allowed, decision.code, decision.reason) == (False, code, reason)
    assert decision.message == f"could not create ResourceClaimTemplate t: the API said no; {tail}"
    assert decision.denied_by == ("template-create",)


@pytest.mark.parametrize("status", [Status.REFUSED, Status.FAILED])
def test_a_failed_create_fails_open_untranslated_with_a_warning(status: Status) -> None:
    decision = provisioned(TRANSLATED, Outcome(status, "t", "the API said no"), "open")
    assert decision.allowed and not decision.patch and not decision.denied_by
    assert decision.warnings == (
        "could not create ResourceClaimTemplate t: the API said no; admitted untranslated "
        "(fail open)",
    )
