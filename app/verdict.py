"""One Decision from the results of the checks a review ran: denied if any denies, every
message kept (bounded as kubectl and the API server show them), memoized by the identity of the
shared results checks answer with."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import NamedTuple

from app.bounded import BoundedCache, CacheName
from app.cluster.provisioning import Outcome, Status
from app.config.policy import FailureMode
from app.k8s.patch import PatchOp
from app.policies.base import Obj, Result

INTERNAL_ERROR = "internal-error"
"""Denial label of a failure; a check's own failure is labelled `internal-error:<check>`."""

MAX_LISTED_VIOLATIONS = 50
MAX_WARNINGS = 20
MAX_WARNING_CHARS = 256
"""kubectl prints warnings one per line; the API server truncates long ones."""


class Decision(NamedTuple):
    """The merged answer to one review (a named tuple, as the request: one or two are built
    for every review that is not answered from the merge memo)."""

    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    patch: tuple[PatchOp, ...] = ()
    warnings: tuple[str, ...] = ()
    templates: tuple[Obj, ...] = ()
    denied_by: tuple[str, ...] = ()
    """Policies (or `invalid-object`, `internal-error`...) that denied: metric labels."""
    findings: int = 0
    excepted: tuple[tuple[str, str], ...] = ()
    """(check, exception) for every policy exception a check applied: metric labels."""
    translated: tuple[str, ...] = ()
    """Translated requests, by mapping rule (`Result.translated`)."""
    policies: tuple[str, ...] = ()
    """Names of the policies that ran."""
    failed_checks: tuple[str, ...] = ()
    """Checks that raised an internal error (answered per failure.internalError, each alone)."""
    vouched: bool = False
    """A pod's mutating call that judged it whole, as its validating call would: the patch marks
    it so (app.policies.translate_judged)."""

    @property
    def label(self) -> str:
        """allowed | patched | denied, for metrics."""
        if not self.allowed:
            return "denied"
        return "patched" if self.patch else "allowed"


ALLOWED = Decision(allowed=True)


def merge(results: list[tuple[str, Result]], failed: Iterable[str] = ()) -> Decision:
    """One decision from every policy's result: denied if any denies, all messages kept.

    `failed` names the checks that raised (their result is the failure policy's answer): their
    denials are labelled `internal-error:<check>`. (A pipeline merges through its
    :class:`Merger`, which remembers the decisions of shared results.)
    """
    return _merge(results, tuple(failed), _build_denial_text)


_first, _second = itemgetter(0), itemgetter(1)


class Merger:
    """:func:`merge` with memos, one per pipeline: checks answer with shared Results (ALLOW,
    dra-only's memoized denials, translation's memoized answers), so the same combination comes
    back for every pod of a shape.

    Both memos are keyed by the identity of those Results and keep the Results with the
    answer, so an id cannot be reused while its entry lives; they go with the pipeline."""

    __slots__ = ("_decisions", "_texts")

    def __init__(self) -> None:
        self._decisions: BoundedCache[
            tuple[tuple[str, ...], tuple[int, ...]], tuple[tuple[Result, ...], Decision]
        ] = BoundedCache(CacheName.MERGED_DECISIONS, 1024)
        self._texts: BoundedCache[int, tuple[Result, str]] = BoundedCache(
            CacheName.DENIAL_TEXTS, 1024
        )

    def merge(self, results: list[tuple[str, Result]], failed: Iterable[str] = ()) -> Decision:
        failed_checks = tuple(failed)
        if failed_checks:
            return _merge(results, failed_checks, self._denial_text)
        given = tuple(map(_second, results))
        key = (tuple(map(_first, results)), tuple(map(id, given)))
        known = self._decisions.get(key)
        # the same Results (a tuple compares identity first; equal values merge alike anyway)
        if known is not None and known[0] == given:
            return known[1]
        decision = _merge(results, failed_checks, self._denial_text)
        if not (decision.patch or decision.templates) or all(
            r.kept for r in given if r.patch or r.templates
        ):  # a patch made for one review would hold its share of the cache budget in vain
            self._decisions.put(key, (given, decision))
        return decision

    def _denial_text(self, result: Result) -> str:
        known = self._texts.get(id(result))
        if known is not None and known[0] is result:
            return known[1]
        text = _build_denial_text(result)
        self._texts.put(id(result), (result, text))
        return text


def _merge(
    results: list[tuple[str, Result]],
    failed_checks: tuple[str, ...],
    denial_text: Callable[[Result], str],
) -> Decision:
    denials = [
        (f"{INTERNAL_ERROR}:{name}" if name in failed_checks else name, r)
        for name, r in results
        if r.denied
    ]
    warnings = _bounded_warnings(w for _, r in results for w in r.warnings)
    findings = sum(r.findings for _, r in results)
    excepted = tuple((name, e) for name, r in results for e in r.excepted)
    translated = tuple(t for _, r in results for t in r.translated)
    names = tuple(name for name, _ in results)
    if denials:
        first = denials[0][1]
        return Decision(
            allowed=False,
            code=first.code,
            reason=first.reason,
            message="\n".join(denial_text(r) for _, r in denials),
            warnings=warnings,
            denied_by=tuple(name for name, _ in denials),
            findings=findings,
            excepted=excepted,
            policies=names,
            failed_checks=failed_checks,
        )
    return Decision(
        allowed=True,
        patch=tuple(op for _, r in results for op in r.patch),
        warnings=warnings,
        templates=tuple(t for _, r in results for t in r.templates),
        findings=findings,
        excepted=excepted,
        translated=translated,
        policies=names,
        failed_checks=failed_checks,
    )


def provisioned(decision: Decision, outcome: Outcome, template_create: FailureMode) -> Decision:
    """`decision` once the templates its patch references were made (`app.cluster.provisioning`):
    unchanged when they are there, else the answer for the template that failed.

    A template of translation's name with other content is always denied, not per
    `failure.templateCreate`: retrying cannot help, and admitting the pod would either reference
    that template or leave it untranslated. A failed create is answered per
    `failure.templateCreate`: open admits the pod untranslated with a warning; closed denies it,
    403 when the API server refused this template (a retry would be refused too), else 500 with
    "retry later".
    """
    if outcome.ok:
        return decision
    if outcome.status is Status.CONFLICT:
        return Decision(
            allowed=False,
            code=403,
            reason="Forbidden",
            message=(
                f"{outcome.reason}; dra-webhook does not reuse it for translation. Delete or "
                "rename that ResourceClaimTemplate (translation creates its own under this name)"
            ),
            denied_by=("template-conflict",),
        )
    message = f"could not create ResourceClaimTemplate {outcome.template}: {outcome.reason}"
    if template_create == "open":
        return Decision(allowed=True, warnings=(f"{message}; admitted untranslated (fail open)",))
    code, reason, retry = (
        (403, "Forbidden", "")
        if outcome.status is Status.REFUSED
        else (500, "InternalError", ", retry later")
    )
    return Decision(
        allowed=False,
        code=code,
        reason=reason,
        message=f"{message}; denied (fail closed){retry}",
        denied_by=("template-create",),
    )


def _build_denial_text(result: Result) -> str:
    lines = [result.summary] if result.summary else []
    shown = result.violations[:MAX_LISTED_VIOLATIONS]
    lines += [f"- {v}" for v in shown]
    if len(result.violations) > len(shown):
        lines.append(f"- ... and {len(result.violations) - len(shown)} more")
    if result.details:
        lines.append(result.details)
    return "\n".join(lines)


def _bounded_warnings(warnings: Iterable[str]) -> tuple[str, ...]:
    """Each warning once (two checks of one call may see the same thing: translation's quota
    foresight and the pod's quota check), cut as kubectl and the API server show them."""
    items = list(dict.fromkeys(warnings))
    kept = [
        w if len(w) <= MAX_WARNING_CHARS else w[: MAX_WARNING_CHARS - 3] + "..."
        for w in items[:MAX_WARNINGS]
    ]
    if len(items) > MAX_WARNINGS:
        kept[-1] = f"... and {len(items) - MAX_WARNINGS + 1} more warnings"
    return tuple(kept)
