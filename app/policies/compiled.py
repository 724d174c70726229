"""Everything a policy needs from the policy file, compiled once at startup."""

from __future__ import annotations

from dataclasses import dataclass

from app.config import Policy
from app.policies.cel_runtime import CelRuntime
from app.policies.legacy import LegacyMatcher, MappingResolver
from app.policies.rules import CompiledRule, compile_rules


@dataclass(frozen=True, slots=True)
class Compiled:
    """Matchers and resolvers built from the policy file; shared by every request."""

    legacy: LegacyMatcher
    mappings: MappingResolver
    cel: CelRuntime
    rules: tuple[CompiledRule, ...]

    @classmethod
    def build(cls, policy: Policy) -> Compiled:
        """Raises PolicyError naming the first admin rule that does not compile."""
        cel = CelRuntime.build(policy)
        return cls(
            legacy=LegacyMatcher(policy.legacy_resources),
            mappings=MappingResolver(policy.mappings),
            cel=cel,
            rules=compile_rules(policy.cel.rules, cel.engine, cel.cache),
        )
