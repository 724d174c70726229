"""Admin rules written in CEL, from the policy file's ``cel.rules``.

Each rule is like a ValidatingAdmissionPolicy validation: ``expression`` sees ``object``,
``oldObject``, ``request`` and ``namespaceObject`` and must be true; otherwise the rule's
``message`` (or its ``messageExpression``'s value) is a denial or a warning, per ``action``.
Rules are compiled when the policy is loaded; one that does not compile stops startup with the
rule's name (:func:`compile_rules` raises :class:`~app.errors.PolicyError`). A rule whose
evaluation fails (a field the object does not have) counts as failed, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.cel.cache import CompileCache
from app.cel.engine import ADMISSION, ADMISSION_MESSAGE, Engine, Program
from app.cel.errors import CelCompileError, CelEvalError, does_not_compile
from app.config.policy import Rule
from app.errors import PolicyError
from app.k8s.labels import Selector
from app.policies.base import ALLOW, Context, Request, Result, Violation, subject
from app.policies.cel_runtime import cel_runtime
from app.policies.parts import Parts


@dataclass(frozen=True, slots=True)
class CompiledRule:
    rule: Rule
    kinds: frozenset[str]
    operations: frozenset[str]
    program: Program
    message_program: Program | None
    namespace_selector: Selector | None = None

    def applies(self, request: Request, labels: Mapping[str, str]) -> bool:
        if request.kind not in self.kinds or request.operation not in self.operations:
            return False
        selector = self.namespace_selector
        return selector is None or selector.matches(labels)


def compile_rules(
    rules: tuple[Rule, ...], engine: Engine, cache: CompileCache
) -> tuple[CompiledRule, ...]:
    """Compile every rule now; a bad one raises PolicyError naming it."""
    out = []
    for i, rule in enumerate(rules):
        where = f"cel.rules[{i}] ({rule.name})"
        program = _compile(cache, engine, rule.expression, ADMISSION, f"{where}.expression")
        message_program = None
        if rule.message_expression:
            message_program = _compile(
                cache,
                engine,
                rule.message_expression,
                ADMISSION_MESSAGE,
                f"{where}.messageExpression",
            )
        out.append(
            CompiledRule(
                rule=rule,
                kinds=frozenset(rule.match.kinds),
                operations=frozenset(rule.match.operations),
                program=program,
                message_program=message_program,
                namespace_selector=(
                    Selector.from_policy(rule.match.namespace_selector)
                    if rule.match.namespace_selector is not None
                    else None
                ),
            )
        )
    return tuple(out)


def admin_rules(parts: Parts) -> tuple[CompiledRule, ...]:
    """Builder: the policy's `cel.rules`, compiled (a bad one stops startup naming it)."""
    runtime = parts.build(cel_runtime)
    return compile_rules(parts.policy.cel.rules, runtime.engine, runtime.cache)


def _compile(
    cache: CompileCache, engine: Engine, expression: str, environment: Any, where: str
) -> Program:
    try:
        return cache.get(engine, expression, environment)
    except CelCompileError as error:
        raise PolicyError(f"policy: {where} {does_not_compile(error, expression)}") from None


def check(request: Request, ctx: Context) -> Result:
    """Run every rule that applies to this request; collect denials and warnings."""
    rules = ctx.parts[admin_rules]
    applicable = [r for r in rules if r.applies(request, ctx.namespace_labels)]
    if not applicable:
        return ALLOW
    engine = ctx.parts[cel_runtime].engine
    activation = engine.activation(ADMISSION, _variables(request, ctx))
    violations = []
    warnings = []
    for rule in applicable:
        try:
            passed = rule.program.evaluate(activation) is True
            failure = "" if passed else _message(rule, activation)
        except CelEvalError as error:
            failure = f"rule {rule.rule.name} could not be evaluated: {error.message}"
        if not failure:
            continue
        if rule.rule.action == "deny":
            violations.append(Violation("", f"{rule.rule.name}: {failure}"))
        else:
            warnings.append(f"{rule.rule.name}: {failure}")
    if violations:
        return Result(
            violations=tuple(violations),
            warnings=tuple(warnings),
            summary=f"{subject(request)} fails admin rules",
        )
    return Result(warnings=tuple(warnings)) if warnings else ALLOW


def _message(rule: CompiledRule, activation: Any) -> str:
    if rule.message_program is not None:
        try:
            text = rule.message_program.evaluate(activation)
        except Exception:  # the rule failed either way: only its wording is lost
            text = None
        if isinstance(text, str) and text.strip():
            return text.strip()
    return rule.rule.message or f"failed expression: {rule.rule.expression}"


def _variables(request: Request, ctx: Context) -> dict[str, Any]:
    namespace_object = None
    if request.namespace:
        namespace_object = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": request.namespace, "labels": dict(ctx.namespace_labels)},
        }
    group, version = request.group, request.version
    return {
        "object": request.object,
        "oldObject": request.old_object,
        "namespaceObject": namespace_object,
        "params": None,
        "request": {
            "uid": request.uid,
            "kind": {"group": group, "version": version, "kind": request.kind},
            "resource": {"group": group, "version": version, "resource": request.resource},
            "subResource": request.sub_resource,
            "name": request.name,
            "namespace": request.namespace,
            "operation": request.operation,
            "userInfo": {"username": request.username},
            "dryRun": request.dry_run,
        },
    }
