"""Legacy extended-resource requests -> DRA claims, as a pure function of a pod spec and rules.

`plan(spec, namespace, rules, view) -> TranslationPlan` is the one entry point (plan.py); its
callers are the mutating policy (which turns a plan into a JSONPatch with `to_patch`), quota's
forecast of what translated pods will claim, dra-only's fix, and `migrate` (app/migrate), which
writes plans into manifests with `manifest.write`. `legacy.py` finds the legacy requests and
maps them to DeviceClasses; `leave.py` says which the scheduler may serve itself (KEP-5004);
`templates.py` builds and names the ResourceClaimTemplates a plan refers to. Nothing here knows
of admission.
"""

from app.translation.patch import to_patch
from app.translation.plan import (
    Left,
    PlannedClaim,
    Problem,
    TranslationPlan,
    TranslationRules,
    Want,
    plan,
)

__all__ = [
    "Left",
    "PlannedClaim",
    "Problem",
    "TranslationPlan",
    "TranslationRules",
    "Want",
    "plan",
    "to_patch",
]
