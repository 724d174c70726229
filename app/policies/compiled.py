"""Everything a policy needs from the policy file, compiled once at startup."""

from __future__ import annotations

from dataclasses import dataclass

from app.config import Policy
from app.policies.cel_runtime import CelRuntime
from app.policies.defaults import ClaimDefaults, compile_selectors
from app.policies.legacy import LegacyMatcher, MappingResolver
from app.policies.quota import QuotaRules
from app.policies.rules import CompiledRule, compile_rules


@dataclass(frozen=True, slots=True)
class Compiled:
    """Matchers and resolvers built from the policy file; shared by every request."""

    legacy: LegacyMatcher
    mappings: MappingResolver
    cel: CelRuntime
    rules: tuple[CompiledRule, ...]
    quotas: QuotaRules
    defaults: ClaimDefaults

    @classmethod
    def build(cls, policy: Policy) -> Compiled:
        """Raises PolicyError naming the first admin rule that does not compile."""
        cel = CelRuntime.build(policy)
        compile_selectors(policy.defaults, cel.engine, cel.cache)
        return cls(
            legacy=LegacyMatcher(policy.legacy_resources),
            mappings=MappingResolver(policy.mappings),
            cel=cel,
            rules=compile_rules(policy.cel.rules, cel.engine, cel.cache),
            quotas=QuotaRules(policy.quotas, policy.resource_quotas),
            defaults=ClaimDefaults(policy.defaults),
        )
