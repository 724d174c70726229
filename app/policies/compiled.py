"""Everything a policy needs from the policy file, compiled once at startup."""

from __future__ import annotations

from dataclasses import dataclass

from app.config import Policy
from app.policies.cel_runtime import CelRuntime
from app.policies.defaults import ClaimDefaults, compile_selectors, translation_hook
from app.policies.dra_only import ResultMemo
from app.policies.legacy import LegacyMatcher, MappingResolver
from app.policies.quota import QuotaRules
from app.policies.rules import CompiledRule, compile_rules
from app.policies.translate_templates import TemplateBuilder


@dataclass(frozen=True, slots=True)
class Compiled:
    """Matchers and resolvers built from the policy file; shared by every request."""

    legacy: LegacyMatcher
    mappings: MappingResolver
    templates: TemplateBuilder
    """Translation's ResourceClaimTemplates; template hooks (DeviceClass defaults) go here."""
    cel: CelRuntime
    rules: tuple[CompiledRule, ...]
    quotas: QuotaRules
    defaults: ClaimDefaults
    dra_only: ResultMemo
    """dra-only answers by request shape (the same pod denied again costs a dict lookup)."""

    @classmethod
    def build(cls, policy: Policy) -> Compiled:
        """Raises PolicyError naming the first admin rule that does not compile."""
        cel = CelRuntime.build(policy)
        compile_selectors(policy.defaults, cel.engine, cel.cache)
        defaults = ClaimDefaults(policy.defaults)
        hooks = (translation_hook(defaults),) if defaults.classes else ()
        return cls(
            legacy=LegacyMatcher(policy.legacy_resources),
            mappings=MappingResolver(policy.mappings),
            templates=TemplateBuilder(policy.translation.template_name_prefix, hooks=hooks),
            cel=cel,
            rules=compile_rules(policy.cel.rules, cel.engine, cel.cache),
            quotas=QuotaRules(policy.quotas, policy.resource_quotas),
            defaults=defaults,
            dra_only=ResultMemo(),
        )
