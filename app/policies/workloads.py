"""The workload catalogue as the checks read it: built from the shipped table and the policy's
`workloadKinds`, and the findings of the scan as results (`app/workloads`).

A check over pod specs runs once per template of the object (`per_template`): a PyTorchJob's
Master and Worker, a RayCluster's head and each worker group are judged as a Deployment's
template is, with field paths into the custom resource; their results are put together here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from app.errors import ObjectShapeError
from app.k8s.objects import PodSpecRef
from app.policies.base import ALLOW, Context, Mode, Request, Result, Violation, old_object
from app.policies.parts import Parts
from app.workloads import Catalogue, Finding, Template, builtin, scan
from app.workloads.entries import parse_entries


def workload_catalogue(parts: Parts) -> Catalogue:
    """Builder: the shipped catalogue with the policy's `workloadKinds` (a bad entry stops
    startup naming its key)."""
    extra = parts.policy.workload_kinds
    if not extra:
        return builtin()
    return builtin().extended(parse_entries(list(extra), "workloadKinds"))


def templates(request: Request, ctx: Context) -> tuple[Template, ...]:
    """The pod templates of the request's object, as decoded at the edge (`base.decode`)."""
    return request.templates()


def old_templates(request: Request, ctx: Context) -> tuple[Template, ...]:
    """The pod templates of the object an UPDATE replaces (`base.old_object`): none on CREATE,
    nor when the old object is malformed (then everything is judged as new)."""
    return request.body.old_templates


def old_specs(request: Request, ctx: Context) -> dict[str, PodSpecRef]:
    """On UPDATE, the old object's pod specs by path (a role that is new has none)."""
    return {t.spec.path: t.spec for t in old_templates(request, ctx)}


def per_template(
    request: Request,
    ctx: Context,
    check: Callable[[PodSpecRef, PodSpecRef | None], Result],
) -> Result:
    """`check(spec, old spec at the same path)` for every pod template, put together."""
    found = templates(request, ctx)
    if not found:
        return ALLOW
    if len(found) == 1:
        spec = found[0].spec
        return check(spec, old_specs(request, ctx).get(spec.path))
    old = old_specs(request, ctx)
    return combine(check(t.spec, old.get(t.spec.path)) for t in found)


def combine(results: Iterable[Result]) -> Result:
    """One result from the results of an object's templates: every violation, warning, patch
    and template kept, the first summary and the details of each, in order."""
    kept = [r for r in results if r is not ALLOW]
    if not kept:
        return ALLOW
    if len(kept) == 1:
        return kept[0]
    denied = [r for r in kept if r.denied]
    first = denied[0] if denied else kept[0]
    return Result(
        violations=tuple(v for r in kept for v in r.violations),
        warnings=tuple(w for r in kept for w in r.warnings),
        patch=tuple(op for r in kept for op in r.patch),
        templates=tuple(t for r in kept for t in r.templates),
        summary=first.summary,
        details="\n".join(r.details for r in denied if r.details),
        reason=first.reason,
        code=first.code,
        findings=sum(r.findings for r in kept),
        excepted=tuple(dict.fromkeys(e for r in kept for e in r.excepted)),
        translated=tuple(t for r in kept for t in r.translated),
    )


def findings(
    request: Request, ctx: Context, is_legacy: Callable[[str], bool]
) -> tuple[Finding, ...]:
    """GPU requests of the object outside what translation can rewrite (operator fields, Helm
    values, embedded manifests, share annotations)."""
    if request.object is None:
        return ()
    return scan(
        request.group,
        request.kind,
        request.object,
        ctx.parts[workload_catalogue],
        is_legacy,
        annotations=ctx.policy.legacy_resources.annotations,
        templates=templates(request, ctx),
    )


def old_finding_paths(request: Request, ctx: Context, is_legacy: Callable[[str], bool]) -> set[str]:
    old_obj = old_object(request)
    if old_obj is None:
        return set()
    try:
        old = scan(
            request.group,
            request.kind,
            old_obj,
            ctx.parts[workload_catalogue],
            is_legacy,
            annotations=ctx.policy.legacy_resources.annotations,
        )
    except ObjectShapeError:
        return set()
    return {f.path for f in old}


def finding_result(
    request: Request,
    ctx: Context,
    found: tuple[Finding, ...],
    is_legacy: Callable[[str], bool],
    *,
    label: str,
    what: str,
) -> Result:
    """The answer to findings: denied in dra-only (new ones; ones the old object had are
    warned about), warned in audit, denied as untranslatable in translate namespaces."""
    if not found:
        return ALLOW
    if ctx.mode is Mode.AUDIT:
        return Result(
            warnings=tuple(
                f"{f.path}: {f.resource}: {f.amount}: would be denied in a dra-only namespace "
                f"({label}); {f.why}"
                for f in found
            ),
            findings=len(found),
        )
    before = old_finding_paths(request, ctx, is_legacy)
    new = [f for f in found if f.path not in before]
    kept = tuple(
        f"{f.path}: {f.message}: predates the {label} label; new objects like it will be denied"
        for f in found
        if f.path in before
    )
    if not new:
        return Result(warnings=kept)
    return Result(
        violations=tuple(Violation(f.path, f.message) for f in new),
        warnings=kept,
        summary=what,
    )
