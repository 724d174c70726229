"""Route a review to the policies that apply and merge their results into one Decision
(`app/verdict.py`).

Routing is a dict lookup on (endpoint, group, kind, operation) built once from the registration
table (`app/pipeline/registrations.py`). Before any policy runs the pipeline resolves the
namespace's mode from the cluster view and skips exempt namespaces: the webhook's own namespace
and kube-system can never be blocked by it.

What the registrations declare besides their check is made when the pipeline is: the parts they
build from the policy, the derived indexes of the view, the parts that follow the view
(`app.policies.parts.FollowsView`: the CEL runtime), so a policy that does not compile stops
startup, and no check builds or subscribes anything on the request path.

A pod's mutating call in a translate namespace is its only call (`Pipeline._judge`): it also
runs the pod's validating checks, and marks a pod it judged whole so that the chart's
validating entry skips it (app.policies.translate_judged says why that cannot be abused).

A review is decided in one call, on the one thread of the event loop. What a check would do at
length (compile a claim's new selectors) it may also do ahead, in steps (`Pipeline.prepare`,
the registrations' `prepare`): the transport runs the steps between turns of the event loop,
then asks for the decision, so one heavy review does not hold up the others.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from functools import partial

from app.cluster.view import ClusterView, Kind
from app.config import Policy
from app.config.policy import StaleView as StaleViewPolicy
from app.devices.warm import warm
from app.errors import ObjectShapeError, PolicyError
from app.pipeline.registrations import (
    ANY_KIND,
    JUDGED_BY_TRANSLATION,
    POD_BEARING,
    READ_THE_FINAL_POD,
    REGISTRATIONS,
    Endpoint,
    Registration,
    rule_registrations,
)
from app.policies import translate_judged
from app.policies.base import Context, Mode, Request, Result, decode, failure_answer, subject
from app.policies.cel_runtime import cel_runtime
from app.policies.exceptions import Clock, system_clock
from app.policies.parts import Parts
from app.policies.workloads import workload_catalogue
from app.translation.sharing import SHAREABLE
from app.verdict import ALLOWED, INTERNAL_ERROR, Decision, Merger
from app.workloads import builtin

__all__ = [
    "ALLOWED",
    "INTERNAL_ERROR",
    "REGISTRATIONS",
    "Decision",
    "Endpoint",
    "Pipeline",
    "Registration",
]

logger = logging.getLogger(__name__)


class Pipeline:
    """Decides reviews. Built once per process from the policy and the cluster view."""

    def __init__(
        self,
        policy: Policy,
        view: ClusterView,
        own_namespace: str,
        registrations: Iterable[Registration] = REGISTRATIONS,
        *,
        clock: Clock = system_clock,
    ) -> None:
        """`clock`: what policy exceptions are judged by (tests inject one)."""
        self.policy = policy
        self.view = view
        registrations = (*registrations, *rule_registrations(policy))
        self.parts = Parts(policy, clock=clock)
        self._merger = Merger()
        """Merges the checks' results, remembering decisions of shared ones (app.verdict)."""
        for reg in registrations:
            for builder in reg.builds:
                self.parts.build(builder)  # raises PolicyError naming what does not compile
        self.parts.seal()
        # what the parts and the checks read of the cluster follows it as it changes, never on a
        # request, and is complete when the view has synced (before ready): the parts that
        # follow the view (the CEL runtime's device index and allocation model), then the
        # derived indexes the registrations declare
        for part in self.parts.following_view():
            for listener in part.listeners():
                view.subscribe(listener)
            view.when_synced(partial(part.synced, view))
        if cel_runtime in self.parts:
            # then the slices grouped as the first claims of each class and translation rule
            # will read them (app.devices.warm), before /readyz too
            devices = self.parts[cel_runtime].index
            rules = _translation_selectors(policy)
            view.when_synced(lambda: warm(devices, view.device_classes(), rules))
        for reg in registrations:
            for index in reg.indexes:
                view.derived(index)  # replayed the view now, at startup, then kept current
        self._exempt = frozenset(policy.exempt_namespaces) | {own_namespace, "kube-system"}
        modes = policy.namespace_modes
        self._label = modes.label
        self._modes = {
            modes.dra_only: Mode.DRA_ONLY,
            modes.translate: Mode.TRANSLATE,
            modes.audit: Mode.AUDIT,
        }
        added = (
            self.parts[workload_catalogue].kinds() - POD_BEARING
            if (workload_catalogue in self.parts)
            else frozenset()
        )
        routes: dict[tuple[Endpoint, str, str, str], list[Registration]] = {}
        for reg in registrations:
            for group, kind in reg.kinds | added if reg.workloads else reg.kinds:
                for operation in reg.operations:
                    routes.setdefault((reg.endpoint, group, kind, operation), []).append(reg)
        self._routes = {key: tuple(regs) for key, regs in routes.items()}
        self._preparing = {
            key: prepared
            for key, regs in self._routes.items()
            if (prepared := tuple(reg for reg in regs if reg.prepare is not None))
        }
        """The routes with checks that prepare (`prepare`): most reviews have none."""
        self._any_kind = tuple(r for r in registrations if r.name in ANY_KIND)
        self._at_translation = tuple(
            reg
            for reg in self._routes.get((Endpoint.VALIDATE, "", "Pod", "CREATE"), ())
            if reg.name not in READ_THE_FINAL_POD
        )
        """What a pod's mutating call in a translate namespace also runs (`_judge`)."""
        self._stale_view = _checked_stale_view(policy, registrations)
        self._catalogue = (
            self.parts[workload_catalogue] if workload_catalogue in self.parts else builtin()
        )

    def decode(self, endpoint: Endpoint, request: Request) -> Request:
        """`request` with its object decoded for the checks that will read it (`base.decode`):
        once per review, before `prepare` and `review`; as it is when no check runs on it (no
        route, an exempt namespace) or it is decoded already. `review` decodes what it is
        given undecoded (offline callers)."""
        if request.decoded or request.namespace in self._exempt:
            return request
        key = (endpoint, request.group, request.kind, request.operation)
        if key not in self._routes:
            return request
        return decode(request, self._catalogue, self.policy.cel)

    def needs_namespace(self, endpoint: Endpoint, request: Request) -> bool:
        """True when some check will run on `request` but the view lacks its namespace."""
        return (
            bool(request.namespace)
            and request.namespace not in self._exempt
            and (endpoint, request.group, request.kind, request.operation) in self._routes
            and self.view.namespace_labels(request.namespace) is None
        )

    def prepares(self, endpoint: Endpoint, request: Request) -> bool:
        """Whether `prepare` would give steps for this review (not None)."""
        return (
            endpoint,
            request.group,
            request.kind,
            request.operation,
        ) in self._preparing and request.namespace not in self._exempt

    def prepare(self, endpoint: Endpoint, request: Request) -> Iterator[None] | None:
        """What the review's checks would do at length, done ahead of `review` one step at a
        time (for the selector check: a step per new selector compiled, within the review's CEL
        budget, the first one reading the object's selectors too), so that the caller can let
        other reviews in between the steps (app.transport); None for most reviews. Whatever is left
        undone the checks do themselves: `review` alone gives the same decision."""
        preparing = self._preparing.get((endpoint, request.group, request.kind, request.operation))
        if preparing is None or request.namespace in self._exempt:
            return None
        return self._prepare(preparing, request)

    def _prepare(self, preparing: tuple[Registration, ...], request: Request) -> Iterator[None]:
        ctx = self._context(request)
        if ctx is None:
            return  # (answered per failure.unknownNamespace)
        stale = self.view.stale_kinds
        for reg in preparing:
            if stale and stale & (reg.reads | {Kind.NAMESPACE}):
                continue  # (answered per failure.staleView)
            assert reg.prepare is not None
            try:
                yield from reg.prepare(request, ctx)
            except Exception:  # a bug: the check does the work itself and answers
                logger.exception(
                    "internal error while preparing check %s",
                    reg.name,
                    extra={"uid": request.uid, "check": reg.name, "kind": request.kind},
                )
                return

    def review(self, endpoint: Endpoint, request: Request) -> Decision:
        """Decide one review; never raises (bugs are answered per the failure policy)."""
        registrations = self._routes.get((endpoint, request.group, request.kind, request.operation))
        return self.settle(endpoint, request, self._answer(endpoint, request, registrations))

    def settle(self, endpoint: Endpoint, request: Request, decision: Decision) -> Decision:
        """The answer to a pod's mutating call that did not judge it whole (`_judge`): without
        the judged-claims annotation the pod arrived with, whatever the answer came from (a
        failed or skipped check, a malformed object, a bug), so that no value its author wrote
        lets it skip validation (app.policies.translate_judged)."""
        if (
            endpoint is Endpoint.MUTATE
            and decision.allowed
            and not decision.vouched
            and _pod_create(request)
            and translate_judged.carried(request.object)
        ):
            return decision._replace(patch=translate_judged.strip(request.object, decision.patch))
        return decision

    def _answer(
        self, endpoint: Endpoint, request: Request, registrations: tuple[Registration, ...] | None
    ) -> Decision:
        if not registrations or request.namespace in self._exempt:
            return ALLOWED
        request = decode(request, self._catalogue, self.policy.cel)
        try:
            return self._review(endpoint, request, registrations)
        except ObjectShapeError as exc:
            if endpoint is Endpoint.MUTATE:
                return ALLOWED  # the validating webhook denies it with the path
            return Decision(
                allowed=False,
                code=422,
                reason="Invalid",
                message=f"{subject(request)} is invalid: {exc}",
                denied_by=("invalid-object",),
            )
        except Exception:
            logger.exception(
                "internal error while reviewing",
                extra={"uid": request.uid, "kind": request.kind, "namespace": request.namespace},
            )
            return self.internal_failure()

    def review_any_kind(self, request: Request) -> Decision:
        """`review` on the validating side for an object of any kind, as offline `check` reads
        manifests: a kind no registration routes is still scanned for GPU requests (dra-only
        denies them, translate reports them untranslatable), never passed in silence."""
        key = (Endpoint.VALIDATE, request.group, request.kind, request.operation)
        return self._answer(Endpoint.VALIDATE, request, self._routes.get(key) or self._any_kind)

    def internal_failure(self) -> Decision:
        """The answer when a bug stops a review: per the policy's failure.internalError."""
        return self._failure(
            self.policy.failure.internal_error,
            INTERNAL_ERROR,
            "dra-webhook failed to check this object (internal error, see its logs)",
        )

    def _review(
        self, endpoint: Endpoint, request: Request, registrations: tuple[Registration, ...]
    ) -> Decision:
        ctx = self._context(request)
        if ctx is None:
            return self._failure(
                self.policy.failure.unknown_namespace,
                "unknown-namespace",
                f"namespace {request.namespace} is not in dra-webhook's cluster view yet",
            )
        results: list[tuple[str, Result]] = []
        failed: list[str] = []
        skipped = self._run(registrations, request, ctx, results, failed)
        if endpoint is Endpoint.MUTATE and ctx.mode is Mode.TRANSLATE and _pod_create(request):
            return self._judge(request, ctx, results, failed, skipped=skipped)
        return self._merger.merge(results, failed)

    def _context(self, request: Request) -> Context | None:
        """What the checks consult besides the request; None when the view lacks its
        namespace."""
        labels = self.view.namespace_labels(request.namespace) if request.namespace else {}
        if labels is None:
            return None
        mode_value = labels.get(self._label)
        mode = self._modes.get(mode_value) if mode_value is not None else None
        return Context(self.view, self.policy, self.parts, mode, labels)  # (Context's order)

    def _judge(
        self,
        request: Request,
        ctx: Context,
        results: list[tuple[str, Result]],
        failed: list[str],
        *,
        skipped: bool,
    ) -> Decision:
        """A pod's mutating call in a translate namespace: one call per pod. Once translation
        and its checks allow it, the pod's validating checks run too (on the pod as written:
        they read the claims translation will make from its plan, as quota and the allow-lists
        do; translation judged the claims it makes with the pod's own), and an allowed pod judged
        by every check, none skipped or failed, is marked with what was judged
        (app.policies.translate_judged), which lets the chart's validating entry skip it."""
        if not any(result.denied for _, result in results):
            made = any(name == "translate" and result.templates for name, result in results)
            also = [
                reg
                for reg in self._at_translation
                if not (made and reg.name in JUDGED_BY_TRANSLATION)
            ]
            skipped = self._run(also, request, ctx, results, failed) or skipped
        decision = self._merger.merge(results, failed)
        if not decision.allowed or skipped or failed:
            return decision
        assert request.object is not None  # (a pod's CREATE)
        claims = translate_judged.claims_after(request.object, decision.patch)
        if not claims:
            return decision  # (no validating call to spare: none is made without claims)
        patch = translate_judged.vouch(request.object, claims, decision.patch)
        return decision._replace(patch=patch, vouched=True)

    def _run(
        self,
        registrations: Iterable[Registration],
        request: Request,
        ctx: Context,
        results: list[tuple[str, Result]],
        failed: list[str],
    ) -> bool:
        """Run the checks into `results` (and the names of those that raised into `failed`);
        True when one was skipped for a stale view."""
        stale = self.view.stale_kinds
        skipped = False
        for reg in registrations:
            if reg.modes is not None and ctx.mode not in reg.modes:
                continue
            result = self._stale_result(reg, stale) if stale else None
            skipped = skipped or result is not None
            if result is None:
                try:
                    result = reg.check(request, ctx)
                except ObjectShapeError:
                    raise  # the object is bad, not the check: a denial with the path
                except Exception:
                    logger.exception(
                        "internal error in check %s",
                        reg.name,
                        extra={
                            "uid": request.uid,
                            "check": reg.name,
                            "kind": request.kind,
                            "namespace": request.namespace,
                        },
                    )
                    failed.append(reg.name)
                    result = self._check_failure(reg.name)
            results.append((reg.name, result))
        return skipped

    def _check_failure(self, name: str) -> Result:
        """One check's own answer when it raised: per failure.internalError, for it alone.

        The other checks' results are merged with it, so their denials still stand.
        """
        text = f"{name}: dra-webhook failed to run this check (internal error, see its logs)"
        return failure_answer(self.policy.failure.internal_error, text)

    def _stale_result(self, reg: Registration, stale: frozenset[Kind]) -> Result | None:
        """The answer of a check that reads a stale kind (per failure.staleView), else None."""
        kinds = stale & (reg.reads | {Kind.NAMESPACE})
        if not kinds:
            return None
        names = ", ".join(sorted(kind.value for kind in kinds))
        text = (
            f"{reg.name}: dra-webhook's cluster view of {names} is out of date "
            "(not in sync with the API server)"
        )
        return failure_answer(
            self._stale_view.mode(reg.name), text, code=503, reason="ServiceUnavailable", retry=True
        )

    def _failure(self, mode: str, label: str, message: str) -> Decision:
        if mode == "open":
            return Decision(allowed=True, warnings=(f"{message}; allowed (fail open)",))
        return Decision(
            allowed=False,
            code=503 if label == "unknown-namespace" else 500,
            reason="ServiceUnavailable" if label == "unknown-namespace" else "InternalError",
            message=f"{message}; denied (fail closed)",
            denied_by=(label,),
        )


def _translation_selectors(policy: Policy) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The DeviceClass and selectors of each translation rule: the policy's mappings, and its
    sharing rules (a share also selects devices that allow multiple allocations)."""
    mapped = [(m.device_class_name, m.selectors) for m in policy.mappings]
    shared = [(r.device_class_name, (*r.selectors, SHAREABLE)) for r in policy.sharing]
    return (*mapped, *shared)


def _pod_create(request: Request) -> bool:
    return (
        request.kind == "Pod"
        and request.group == ""
        and request.operation == "CREATE"
        and request.object is not None
    )


def _checked_stale_view(policy: Policy, registrations: Iterable[Registration]) -> StaleViewPolicy:
    """failure.staleView, after checking that every check it names exists."""
    stale_view = policy.failure.stale_view
    known = {reg.name for reg in registrations}
    for name in stale_view.checks:
        if name not in known:
            raise PolicyError(
                f"failure.staleView.checks.{name}: no such check; checks are "
                + ", ".join(sorted(known))
            )
    return stale_view
