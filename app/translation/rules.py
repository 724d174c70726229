"""What translation needs from the policy file, compiled once: `TranslationRules`."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.config.translation import Translation
from app.translation.legacy import LegacyMatcher, MappingResolver
from app.translation.sharing import SharingRules
from app.translation.templates import TemplateBuilder


@dataclass(frozen=True, slots=True)
class TranslationRules:
    """What translation needs from the policy file, compiled once."""

    legacy: LegacyMatcher
    mappings: MappingResolver
    templates: TemplateBuilder
    config: Translation
    sharing: SharingRules = field(default_factory=SharingRules)
    """GPU-sharing names -> consumable-capacity requests (app.translation.sharing)."""
    unlisted_counts: frozenset[str] = frozenset()
    """Share count names the legacy list leaves out (HAMi's `nvidia.com/gpu` in a policy that
    does not list it): a share's fix depends on their amounts, though they are not legacy."""

    @property
    def leaves(self) -> bool:
        """Whether the policy may leave a request to the scheduler (`translation.leaveMapped`,
        or a `mappings` rule's `leaveToScheduler: true`: app.translation.leave)."""
        return self.config.leave_mapped or self.mappings.leaves
