"""Resource names that are almost a legacy name: `nvidia.con/gpu`, `nvidia.com/GPU`,
`nvidia.com/gpus`.

Such a name is no legacy request, so nothing denies or translates it, and no node advertises it
and no DeviceClass maps it: the pod waits Pending forever without a message. Every reader of
pod specs (admission, `check`, `migrate`, `report`) says "did you mean" for it.

A name is a near miss of a legacy name when it is not one itself, has a prefix (`cpu`,
`memory`, `hugepages-2Mi`, `ephemeral-storage` are Kubernetes' own and never are), and is:
the legacy name in other case; its plural (or a plural made singular); within two edits of it
(`nvidia.con/gpu`); or a GPU-looking name under a vendor's prefix that no legacy name holds
(`nvidia.com/gpu-a100`, `habana.ai/gaudi-hpu`; the vendors are the prefixes of the policy's
exact legacy names: `nvidia.com/`, `amd.com/`, `habana.ai/` by default, and `gpu.intel.com/`
is a pattern that takes every name). Only GPU-looking names count under a vendor's prefix:
the network operators' SR-IOV and RDMA plugins name their own resources there freely
(`nvidia.com/hostdev`, `nvidia.com/mlnxnics`). A name the cluster's DeviceClasses map is served
by the scheduler, and is not a near miss (the callers ask the view: it changes, this does not).

The candidates are computed once from the policy; the answer per name is memoized in a
bounded cache, since the names come from users.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.bounded import BoundedCache, CacheName
from app.k8s.objects import PodSpecRef, containers, resource_map
from app.translation.legacy import LegacyMatcher

_GPU_WORDS = re.compile(r"gpu|mig|gaudi|hpu|i915")
"""What makes a name under a vendor's prefix look like a GPU."""
MAX_EDITS = 2
NAMES_KEPT = 4096


class NearMisses:
    """`near(name)`: the legacy name `name` probably meant, or None."""

    def __init__(self, is_legacy: LegacyMatcher, names: Iterable[str]) -> None:
        """`names`: the policy's legacy names (exact names and shell patterns) and the sharing
        rules' names."""
        self._is_legacy = is_legacy
        listed = list(dict.fromkeys(names))
        self._exact = tuple(n for n in listed if not any(c in n for c in "*?["))
        self._vendors: dict[str, str] = {}
        """A vendor's prefix (`nvidia.com/`) -> its first legacy name, suggested for an unknown
        GPU-looking name under it."""
        for n in self._exact:
            if "/" in n:
                self._vendors.setdefault(n.rpartition("/")[0] + "/", n)
        self._memo: BoundedCache[str, str] = BoundedCache(CacheName.NEAR_MISS_NAMES, NAMES_KEPT)
        self._known = self._memo.reader()
        """A hit without the LRU's bookkeeping (every prefixed name of every review is asked
        about): counted, not refreshed; a miss goes through `get`."""

    def __call__(self, name: str) -> str | None:
        if "/" not in name:
            return None  # cpu, memory, hugepages-*, ephemeral-storage: Kubernetes' own
        known = self._known(name)
        if known is not None:
            self._memo.hits += 1  # (counted as `get` counts it, without refreshing the entry)
            return known or None
        known = self._memo.get(name)
        if known is None:
            known = self._memo.put(name, self._near(name) or "")
        return known or None

    def _near(self, name: str) -> str | None:
        if len(name) > 316 or self._is_legacy(name):
            return None  # longer than any valid resource name: not worth comparing
        folded = name.casefold()
        if folded != name and self._is_legacy(folded):
            return folded
        for plural in (folded.removesuffix("s"), folded.removesuffix("es"), folded + "s"):
            if plural != folded and self._is_legacy(plural):
                return plural
        for candidate in self._exact:
            if _within(folded, candidate.casefold(), MAX_EDITS):
                return candidate
        prefix, _, rest = folded.rpartition("/")
        suggested = self._vendors.get(prefix + "/")
        return suggested if suggested is not None and _GPU_WORDS.search(rest) else None


def _within(a: str, b: str, limit: int) -> bool:
    """Whether the Levenshtein distance of `a` and `b` is at most `limit` (banded: rows are
    cut off once every cell passes the limit)."""
    if abs(len(a) - len(b)) > limit:
        return False
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        if min(current) > limit:
            return False
        previous = current
    return previous[-1] <= limit


@dataclass(frozen=True, slots=True)
class NearMiss:
    """A container's request for a near-miss name."""

    path: str
    resource: str
    amount: str
    meant: str

    @property
    def message(self) -> str:
        return (
            f"{self.resource}: {self.amount}: did you mean {self.meant}? No node advertises "
            f"{self.resource} and no DeviceClass maps it: the pod would stay Pending"
        )


def near_misses(
    spec: PodSpecRef, near: NearMisses, mapped: Callable[[str], object | None]
) -> list[NearMiss]:
    """The near-miss requests of a pod spec, in container order (a name in both limits and
    requests once, by its limit). `mapped`: the DeviceClass that maps a name, if any (the
    view's `device_class_for_extended_resource`): such a name is served, not a typo. Cheap
    when nothing is near: names without a prefix are never looked up."""
    found: list[NearMiss] = []
    for ref in containers(spec):
        limits = resource_map(ref, "limits")
        requests = resource_map(ref, "requests")
        for which, asked in (("limits", limits), ("requests", requests)):
            for name, amount in asked.items():
                if "/" not in name or (which == "requests" and name in limits):
                    continue  # (cpu, memory: never near anything, `NearMisses`)
                meant = near(name)
                if meant is not None and mapped(name) is None:
                    path = f"{ref.path}.resources.{which}[{name}]"
                    found.append(NearMiss(path, name, str(amount), meant))
    return found
