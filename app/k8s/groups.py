"""Group claims: the `resourceClaims` of `scheduling.k8s.io` Workloads and PodGroups.

A PodGroup's `spec.resourceClaims[]` (and a Workload's `spec.podGroupTemplates[].resourceClaims[]`,
copied into each PodGroup made from the template) names ResourceClaims or ResourceClaimTemplates
shared by every pod of the group: `{name, resourceClaimName | resourceClaimTemplateName}`, at
most 4 per group (k8s.io/api scheduling/v1beta1 `PodGroupResourceClaim`, served in 1.37 as
v1beta1 and v1alpha3; 1.36's v1alpha2 has the same shape). A template yields one claim for the
whole group, owned by the PodGroup and reserved for it (`status.reservedFor` names the PodGroup,
`status.resourceClaimStatuses` the claim made), not one per pod.

A pod uses a group's claim by naming its PodGroup (`spec.schedulingGroup.podGroupName`) and
carrying a `resourceClaims` entry equal to the group's: the same name and the same claim or
template (k8s.io/dynamic-resource-allocation resourceclaim `BindTo`). Any other entry, even one
naming the same template under another name, is the pod's own claim.

Composite templates (`compositePodGroupTemplates[]`, gate CompositePodGroup) nest pod group
templates up to 4 deep (`WorkloadMaxTreeDepth`): they are walked, deeper nesting is refused.

Every reader checks the type of what it reads and raises ObjectShapeError with the field path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from app.errors import ObjectShapeError
from app.k8s.objects import list_field

Obj = dict[str, Any]

GROUP = "scheduling.k8s.io"
GROUP_KINDS = frozenset({(GROUP, "Workload"), (GROUP, "PodGroup")})
"""The kinds that carry group claims."""
MAX_DEPTH = 4
"""`WorkloadMaxTreeDepth`: how deep composite pod group templates nest."""

ClaimKey = tuple[str, str | None, str | None]
"""(name, resourceClaimName, resourceClaimTemplateName): what a pod's entry must equal."""


@dataclass(frozen=True, slots=True)
class GroupClaim:
    """One entry of a group's `resourceClaims`, with where it is."""

    path: str
    """`spec.resourceClaims[0]`, `spec.podGroupTemplates[1].resourceClaims[0]`."""
    name: str
    claim_name: str | None
    template_name: str | None
    group_template: str = ""
    """The Workload's pod group template it belongs to (its name), "" in a PodGroup."""

    @property
    def key(self) -> ClaimKey:
        return self.name, self.claim_name, self.template_name

    @property
    def field(self) -> str:
        """The path of the field naming the claim or template."""
        which = "resourceClaimName" if self.claim_name is not None else "resourceClaimTemplateName"
        return f"{self.path}.{which}"

    @property
    def label(self) -> str:
        """`template gpus` or `claim shared`: what it names."""
        if self.claim_name is not None:
            return f"claim {self.claim_name}"
        return f"template {self.template_name}"


def group_claims(obj: Obj, kind: str) -> list[GroupClaim]:
    """Every group claim of a Workload or PodGroup (none for another kind). Raises
    ObjectShapeError at the first field of the wrong type."""
    spec = obj.get("spec")
    if spec is None:
        return []
    if not isinstance(spec, dict):
        raise ObjectShapeError("spec", "must be an object")
    if kind == "PodGroup":
        return list(_entries(spec, "spec", ""))
    if kind == "Workload":
        return list(_templates(spec, "spec", 1))
    return []


def _templates(spec: Obj, path: str, depth: int) -> Iterator[GroupClaim]:
    if depth > MAX_DEPTH:
        raise ObjectShapeError(path, f"pod group templates nest at most {MAX_DEPTH} deep")
    for index, template in enumerate(list_field(spec, "podGroupTemplates", path)):
        where = f"{path}.podGroupTemplates[{index}]"
        if not isinstance(template, dict):
            raise ObjectShapeError(where, "must be an object")
        name = template.get("name", "")
        if not isinstance(name, str):
            raise ObjectShapeError(f"{where}.name", "must be a string")
        yield from _entries(template, where, name)
    for index, composite in enumerate(list_field(spec, "compositePodGroupTemplates", path)):
        where = f"{path}.compositePodGroupTemplates[{index}]"
        if not isinstance(composite, dict):
            raise ObjectShapeError(where, "must be an object")
        yield from _templates(composite, where, depth + 1)


def _entries(holder: Obj, path: str, group_template: str) -> Iterator[GroupClaim]:
    for index, entry in enumerate(list_field(holder, "resourceClaims", path)):
        where = f"{path}.resourceClaims[{index}]"
        if not isinstance(entry, dict):
            raise ObjectShapeError(where, "must be an object")
        name = entry.get("name", "")
        if not isinstance(name, str):
            raise ObjectShapeError(f"{where}.name", "must be a string")
        claim = _optional_name(entry, "resourceClaimName", where)
        template = _optional_name(entry, "resourceClaimTemplateName", where)
        if claim is not None and template is not None:
            raise ObjectShapeError(
                where, "must set exactly one of resourceClaimName and resourceClaimTemplateName"
            )
        if claim is None and template is None:
            continue  # names nothing: the API server refuses it, nothing to judge here
        yield GroupClaim(where, name, claim, template, group_template)


def _optional_name(entry: Obj, key: str, path: str) -> str | None:
    value = entry.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ObjectShapeError(f"{path}.{key}", "must be a string")
    return value


def pod_group_name(pod_spec: Mapping[str, Any]) -> str | None:
    """The PodGroup a pod spec names (`schedulingGroup.podGroupName`), or None. Never raises:
    a malformed field is the API server's to refuse, and names no group here."""
    group = pod_spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, dict) else None
    return name if isinstance(name, str) and name else None


def pod_claim_key(entry: Any) -> ClaimKey | None:
    """The key of a pod's `resourceClaims` entry, comparable to `GroupClaim.key`."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return None
    claim, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
    return (
        entry["name"],
        claim if isinstance(claim, str) and claim else None,
        template if isinstance(template, str) and template else None,
    )


def stored_group_keys(pod_group: Mapping[str, Any]) -> frozenset[ClaimKey]:
    """The claim keys of a PodGroup the cluster holds (its malformed entries left out: the API
    server validated what it stored)."""
    try:
        return frozenset(c.key for c in group_claims(dict(pod_group), "PodGroup"))
    except ObjectShapeError:
        return frozenset()
