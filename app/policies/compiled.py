"""Everything a policy needs from the policy file, compiled once at startup."""

from __future__ import annotations

from dataclasses import dataclass

from app.config import Policy
from app.policies.defaults import ClaimDefaults
from app.policies.legacy import LegacyMatcher, MappingResolver
from app.policies.quota import QuotaRules


@dataclass(frozen=True, slots=True)
class Compiled:
    """Matchers and resolvers built from the policy file; shared by every request."""

    legacy: LegacyMatcher
    mappings: MappingResolver
    quotas: QuotaRules
    defaults: ClaimDefaults

    @classmethod
    def build(cls, policy: Policy) -> Compiled:
        return cls(
            legacy=LegacyMatcher(policy.legacy_resources),
            mappings=MappingResolver(policy.mappings),
            quotas=QuotaRules(policy.quotas, policy.resource_quotas),
            defaults=ClaimDefaults(policy.defaults),
        )
