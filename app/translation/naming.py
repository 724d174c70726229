"""How translation names the claims it adds to a pod, and how its messages name a container.

Claim names are readable (<prefix>-<resource's last part>-<container>, a DNS label) and never
reuse a name the pod already has; dra-only's fix prints the same names (app.policies.dra_only).
"""

from __future__ import annotations

from app.bounded import CacheName, memoized
from app.k8s.objects import ContainerRef
from app.translation.templates import MAX_NAME, slug


class ClaimNames:
    """Readable pod-level claim names (<resource>-<container>) that never reuse a taken name."""

    def __init__(self, taken: set[str], prefix: str) -> None:
        self._taken = taken
        self._prefix = prefix

    def new(self, tail: str, who: str) -> str:
        base = claim_base(self._prefix, tail, who)
        name, n = base, 1
        while name in self._taken:
            n += 1
            suffix = f"-{n}"
            name = slug(base, MAX_NAME - len(suffix)) + suffix
        self._taken.add(name)
        return name


@memoized(CacheName.CLAIM_NAMES, 4096)
def claim_base(prefix: str, tail: str, who: str) -> str:
    """<prefix>-<tail>-<who> as a DNS label; memoized (container names repeat across pods)."""
    return slug("-".join(p for p in (prefix, tail, who) if p), MAX_NAME) or "claim"


@memoized(CacheName.CLAIM_NAMES, 4096)
def claim_name(prefix: str, resource: str, container: str) -> str:
    """The name translation gives the claim of one container's legacy request, before
    numbering (<prefix>-<resource's last part>-<container>); memoized."""
    return claim_base(prefix, tail(resource), container)


def tail(resource: str) -> str:
    """The last part of a resource name (gpu for nvidia.com/gpu), as claim names use it."""
    return resource.rsplit("/", 1)[-1]


def who(ref: ContainerRef) -> str:
    if ref.is_sidecar:
        return f"sidecar container {ref.name}"
    if ref.field == "initContainers":
        return f"init container {ref.name}"
    return f"container {ref.name}"
