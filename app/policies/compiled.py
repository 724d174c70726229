"""Everything a policy needs from the policy file, compiled once at startup."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.config import Policy
from app.policies.cel_runtime import CelRuntime
from app.policies.defaults import ClaimDefaults, compile_selectors, translation_hook
from app.policies.exceptions import Clock, Exceptions, system_clock
from app.policies.memo import ShapeMemo
from app.policies.quota_rules import QuotaRules
from app.policies.rules import CompiledRule, compile_rules
from app.translation import TranslationRules
from app.translation.legacy import LegacyMatcher, MappingResolver
from app.translation.sharing import SharingRules
from app.translation.templates import TemplateBuilder

if TYPE_CHECKING:
    from app.policies.base import Result


@dataclass(frozen=True, slots=True)
class Compiled:
    """Matchers and resolvers built from the policy file; shared by every request."""

    legacy: LegacyMatcher
    mappings: MappingResolver
    templates: TemplateBuilder
    """Translation's ResourceClaimTemplates; template hooks (DeviceClass defaults) go here."""
    translation: TranslationRules
    """The three above plus the policy's translation options: what `translation.plan` takes."""
    cel: CelRuntime
    rules: tuple[CompiledRule, ...]
    quotas: QuotaRules
    defaults: ClaimDefaults
    dra_only: ShapeMemo[Result]
    """dra-only answers by request shape (the same pod denied again costs a dict lookup)."""
    exceptions: Exceptions
    """The policy's exceptions with the clock they are judged by."""

    @classmethod
    def build(cls, policy: Policy, clock: Clock = system_clock) -> Compiled:
        """Raises PolicyError naming the first admin rule that does not compile. `clock` is
        what exceptions are judged by (tests inject one)."""
        cel = CelRuntime.build(policy)
        compile_selectors(policy.defaults, cel.engine, cel.cache)
        defaults = ClaimDefaults(policy.defaults)
        hooks = (translation_hook(defaults),) if defaults.classes else ()
        mappings = MappingResolver(policy.mappings)
        sharing = SharingRules(policy.sharing, mappings.maps)
        legacy = LegacyMatcher(policy.legacy_resources, extra=sharing.names)
        templates = TemplateBuilder(policy.translation.template_name_prefix, hooks=hooks)
        return cls(
            legacy=legacy,
            mappings=mappings,
            templates=templates,
            translation=TranslationRules(
                legacy,
                mappings,
                templates,
                policy.translation,
                sharing,
                frozenset(name for name in sharing.counts if not legacy(name)),
            ),
            cel=cel,
            rules=compile_rules(policy.cel.rules, cel.engine, cel.cache),
            quotas=QuotaRules(policy.quotas, policy.resource_quotas),
            defaults=defaults,
            dra_only=ShapeMemo(),
            exceptions=Exceptions(policy.exceptions, clock),
        )
