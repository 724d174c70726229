"""What several checks build from the policy at load: translation's rules and their parts.

dra-only (its fix is translation's plan), translation, quota (its forecast of what translated
pods will claim), offline `check` and `migrate` all read the same legacy-name matcher, mappings,
sharing rules and translation rules. They live here, not in one of those checks, so each
imports this module rather than another check (`app/policies/parts.py` says what a builder is).

The one check this module reads is `defaults`: translation's templates carry the DeviceClass
defaults (`claim_defaults`, applied by `translation_hook`), the part that check owns.
"""

from __future__ import annotations

from app.k8s.objects import PodSpecRef
from app.policies.base import Context, Mode
from app.policies.defaults import claim_defaults, translation_hook
from app.policies.parts import Parts
from app.translation import TranslationPlan, TranslationRules, plan
from app.translation.legacy import LegacyMatcher, MappingResolver
from app.translation.near_miss import NearMisses
from app.translation.sharing import SharingRules
from app.translation.templates import TemplateBuilder


def legacy_matcher(parts: Parts) -> LegacyMatcher:
    """Builder: which resource names are legacy extended resources (`legacyResources`, and the
    names of the sharing rules)."""
    return LegacyMatcher(parts.policy.legacy_resources, extra=parts.build(sharing_rules).names)


def near_miss_names(parts: Parts) -> NearMisses:
    """Builder: which names are probably typos of a legacy name (candidates found at load)."""
    names = [*parts.policy.legacy_resources.names, *sorted(parts.build(sharing_rules).names)]
    return NearMisses(parts.build(legacy_matcher), names)


def mapping_resolver(parts: Parts) -> MappingResolver:
    """Builder: legacy resource -> DeviceClass (`mappings`, then the view's DeviceClasses)."""
    return MappingResolver(parts.policy.mappings)


def sharing_rules(parts: Parts) -> SharingRules:
    """Builder: GPU-sharing names -> consumable-capacity requests (`sharing`)."""
    return SharingRules(
        parts.policy.sharing,
        parts.build(mapping_resolver).maps,
        whole_devices=parts.policy.translation.shares_without_capacity == "wholeDevices",
    )


def translation_rules(parts: Parts) -> TranslationRules:
    """Builder: what `translation.plan` takes; its templates carry the DeviceClass defaults."""
    defaults = parts.build(claim_defaults)
    hooks = (translation_hook(defaults),) if defaults.classes else ()
    templates = TemplateBuilder(parts.policy.translation.template_name_prefix, hooks=hooks)
    legacy = parts.build(legacy_matcher)
    sharing = parts.build(sharing_rules)
    return TranslationRules(
        legacy,
        parts.build(mapping_resolver),
        templates,
        parts.policy.translation,
        sharing,
        frozenset(name for name in sharing.counts if not legacy(name)),
    )


def plan_for(
    spec: PodSpecRef, namespace: str, ctx: Context, *, replace_own: bool = False
) -> TranslationPlan:
    """The translation plan of a pod spec under the policy and cluster view of `ctx`; in translate
    namespaces without the requests the policy leaves to the scheduler (app.translation.leave)."""
    return plan(
        spec,
        namespace,
        ctx.parts[translation_rules],
        ctx.view,
        replace_own=replace_own,
        leave=ctx.mode is Mode.TRANSLATE,
    )
