"""The Kubernetes release the webhook serves, and which DRA fields its API server keeps.

What DRA does differs by release: a field whose feature gate is off is *dropped* by the API server
without an error (a ResourceClaim request's `exactly.capacity` is kept on 1.36 and silently
dropped on 1.34 and 1.35, whose `DRAConsumableCapacity` is alpha and off). A webhook that writes
such a field into a template writes what the cluster will not hold: the claim then asks for a
whole device, or the create is refused and the user reads an internal 422.

So the webhook learns, rather than guesses, what its API server keeps (`app.cluster.probe`: the
release from `/version`, the served `resource.k8s.io` versions, and a server-side dry-run create
of a probe template in its own namespace that shows which fields survive), and the checks that
write DRA objects ask `ServedRelease.keeps` before writing a gated field.

Without an API server (`check`, `migrate`, a static cluster file) there is nothing to probe: the
release is the one the user names (`--kube-version`, or a `kubectl version -o yaml` document in
the cluster file), and its fields are that release's defaults (`DEFAULTS`, read from each
release's `pkg/features/kube_features.go`). With neither, the newest behaviour is assumed
(`ServedRelease.assumed()`), as before releases were told apart.

Fields the webhook only reads (a DeviceClass's `extendedResourceName`, a slice's counters and
taints) need no probe: the API server stores them only where the gate is on, so the view holds
them only where the release serves them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Feature(StrEnum):
    """A DRA field the API server keeps or drops by feature gate. The value is the gate."""

    CONSUMABLE_CAPACITY = "DRAConsumableCapacity"
    """`exactly.capacity.requests` on a claim request (GPU shares)."""
    DEVICE_TAINTS = "DRADeviceTaints"
    """`tolerations` on a claim request, taints on devices."""
    ADMIN_ACCESS = "DRAAdminAccess"
    """`adminAccess` on a claim request."""
    PRIORITIZED_LIST = "DRAPrioritizedList"
    """`firstAvailable` on a claim request."""
    PARTITIONABLE_DEVICES = "DRAPartitionableDevices"
    """Shared counters in ResourceSlices (MIG partitions): read from slices, never written."""
    EXTENDED_RESOURCE = "DRAExtendedResource"
    """A DeviceClass's `extendedResourceName` served by the scheduler: read from classes."""

    @property
    def field(self) -> str:
        return _FIELDS[self]


_FIELDS = {
    Feature.CONSUMABLE_CAPACITY: "exactly.capacity",
    Feature.DEVICE_TAINTS: "exactly.tolerations",
    Feature.ADMIN_ACCESS: "exactly.adminAccess",
    Feature.PRIORITIZED_LIST: "firstAvailable",
    Feature.PARTITIONABLE_DEVICES: "sharedCounters",
    Feature.EXTENDED_RESOURCE: "extendedResourceName",
}

PROBED = (
    Feature.CONSUMABLE_CAPACITY,
    Feature.DEVICE_TAINTS,
    Feature.ADMIN_ACCESS,
    Feature.PRIORITIZED_LIST,
)
"""The features a probe template shows (app.cluster.probe); the others are read off objects."""

_ALL = frozenset(Feature)
_GA_SINCE_134 = frozenset({Feature.ADMIN_ACCESS, Feature.PRIORITIZED_LIST})
DEFAULTS: dict[int, frozenset[Feature]] = {
    34: _GA_SINCE_134,
    35: _GA_SINCE_134,
    36: _ALL,
    37: _ALL,
}
"""The features on by default per minor release (1.34.9, 1.35.6 and 1.36.2 checked on real
binaries; 1.37 as 1.36 plus the extended resource path's GA). A minor newer than the table takes
the newest row, an older one the oldest: the chart supports 1.34 on."""

SUPPORTED_MINORS = (34, 35, 36, 37)
_NEWEST = max(SUPPORTED_MINORS)

PREEMPTS_FOR_DRA: frozenset[int] = frozenset()
"""The minor releases whose kube-scheduler preempts lower-priority pods to free DRA devices.

None yet: the DynamicResources plugin has no preemption support (the Kubernetes DRA docs,
"Limitations"; KEP-5690 missed 1.37), so a pod whose claims find every matching device held
stays Pending, while the same pod asking `nvidia.com/gpu` through a device plugin evicts a
lower-priority holder. The day a release does, it is one entry here and the webhook stops
saying what translation takes away on that release (`ServedRelease.preempts_for_dra`)."""

SCHEDULING = "scheduling.k8s.io"
GROUP_CLAIM_VERSIONS: dict[int, tuple[str, ...]] = {36: ("v1alpha2",), 37: ("v1beta1", "v1alpha3")}
"""The `scheduling.k8s.io` versions whose Workload and PodGroup carry `resourceClaims` (group
claims, `app.k8s.groups`), newest first, per minor (k8s.io/api scheduling/ and
pkg/registry/scheduling of each release). None is on by default: the API needs feature gate
`GenericWorkload` and the version in `--runtime-config` (alpha in 1.35-1.36, beta and off in
1.37), the field gate `DRAWorkloadResourceClaims` (alpha in 1.36, beta and off in 1.37); with
the field gate off the API server drops `resourceClaims` before validating admission, so the
webhook only ever judges group claims the release keeps. Which versions a cluster serves is
learned from discovery (`ServedRelease.group_versions`)."""
GROUP_CLAIM_GATES = ("GenericWorkload", "DRAWorkloadResourceClaims")
TAINT_RULES_SERVED_BY_DEFAULT: dict[int, tuple[str, ...]] = {37: ("v1",)}
"""The `resource.k8s.io` versions that serve DeviceTaintRule without `--runtime-config`, per
minor (k8s.io/kubernetes pkg/registry/resource/rest/storage_resource.go and pkg/controlplane's
default API versions): v1alpha3 (1.33 on) and v1beta2 (1.36 on) are off by default, v1 (1.37)
is on. Offline, a named release is taken to serve these; live, discovery says."""
TAINT_RULES_ACT_BY_DEFAULT = frozenset({37})
"""Minors where a stored DeviceTaintRule is acted on by default: the scheduler and the
device-taint eviction controller read rules only with DRADeviceTaintRules (1.35 alpha, 1.36
beta but off, 1.37 GA and on), and on 1.34 with DRADeviceTaints (alpha, off). The API server
serves the kind with its API version alone (1.36 stores v1beta2 rules with the gate off), so a
rule can be accepted and do nothing."""

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_minor(version: str) -> int | None:
    """The minor of a release: 'v1.34.12' -> 34, '1.36' -> 36; None if not a 1.x release."""
    match = _VERSION.match(version.strip())
    if match is None or match.group(1) != "1":
        return None
    return int(match.group(2))


@dataclass(frozen=True, slots=True)
class ServedRelease:
    """A release and the DRA features its API server keeps."""

    version: str
    """`gitVersion` as /version answers (v1.34.12), or the name given (1.34); "" when assumed."""
    features: frozenset[Feature]
    resource_versions: tuple[str, ...] = ("v1",)
    """The `resource.k8s.io` versions served, newest first (from discovery; the defaults'
    `v1` alone offline)."""
    source: str = "assumed"
    """How it was learned: `probed` (the API server showed it), `release defaults` (a version
    named offline, or a probe that could not run), `assumed` (nothing known)."""
    group_versions: tuple[str, ...] = ()
    """The `scheduling.k8s.io` versions serving PodGroups (discovery), newest first; none
    offline and where the API is off (`GROUP_CLAIM_VERSIONS`)."""
    taint_rules: tuple[str, ...] = ()
    """The `resource.k8s.io` versions that serve DeviceTaintRule (discovery; offline the
    release's defaults, `TAINT_RULES_SERVED_BY_DEFAULT`)."""

    @classmethod
    def assumed(cls) -> ServedRelease:
        """Nothing known: the newest release's behaviour (every feature kept)."""
        return cls("", _ALL)

    @classmethod
    def unknown(cls, why: str = "not learned yet") -> ServedRelease:
        """A live cluster not probed yet: only what every supported release keeps, so nothing
        is written that some release would drop."""
        return cls("", _GA_SINCE_134, (), why)

    @classmethod
    def from_defaults(cls, version: str, source: str = "release defaults") -> ServedRelease:
        """The release's default features (raises ValueError for a name that is no release)."""
        minor = parse_minor(version)
        if minor is None:
            raise ValueError(f"{version!r} is not a Kubernetes release (1.34, v1.36.2)")
        row = DEFAULTS.get(minor)
        if row is None:
            row = DEFAULTS[max(DEFAULTS)] if minor > max(DEFAULTS) else DEFAULTS[min(DEFAULTS)]
        newest = max(TAINT_RULES_SERVED_BY_DEFAULT)
        rules = TAINT_RULES_SERVED_BY_DEFAULT.get(
            minor, TAINT_RULES_SERVED_BY_DEFAULT[newest] if minor > newest else ()
        )
        return cls(version, row, source=source, taint_rules=rules)

    @property
    def minor(self) -> int | None:
        return parse_minor(self.version) if self.version else None

    @property
    def frees_refused_counters(self) -> bool:
        """Whether the scheduler's allocator gives back the counters of a device it refused
        for a taint or a constraint (k8s.io/dynamic-resource-allocation `rollbackDevice`, from
        1.36.3); before, they stay charged for the rest of the node's search. Unknown: as the
        newest."""
        match = _VERSION.match(self.version.strip()) if self.version else None
        if match is None:
            return True
        minor, patch = int(match.group(2)), int(match.group(3) or 0)
        return minor > 36 or (minor == 36 and patch >= 3)

    @property
    def preempts_for_dra(self) -> bool:
        """Whether this release's scheduler preempts lower-priority pods for DRA devices
        (`PREEMPTS_FOR_DRA`). Unknown (offline with no release named, a live cluster not probed
        yet): as the newest supported release; a minor past the table: as the newest."""
        minor = self.minor
        if minor is None or minor > _NEWEST:
            minor = _NEWEST
        return minor in PREEMPTS_FOR_DRA

    def taint_rules_gated(self) -> str | None:
        """Why a DeviceTaintRule this release stores may do nothing (its gate is off by
        default here), or None where rules act by default (or the release is unknown)."""
        minor = self.minor
        if minor is None or minor in TAINT_RULES_ACT_BY_DEFAULT or minor > max(DEFAULTS):
            return None
        gate = "DRADeviceTaints" if minor <= 34 else "DRADeviceTaintRules"
        return (
            f"{self.name} acts on DeviceTaintRules only with the feature gate {gate} on "
            "(off by default): without it the rule is stored and does nothing"
        )

    def keeps(self, feature: Feature) -> bool:
        """Whether the API server stores `feature`'s field (drops it silently otherwise)."""
        return feature in self.features

    @property
    def name(self) -> str:
        """How messages name it: 'Kubernetes v1.34.12' (or 'this cluster's Kubernetes')."""
        return f"Kubernetes {self.version}" if self.version else "this cluster's Kubernetes"

    def drops(self, feature: Feature) -> str | None:
        """Why `feature`'s field cannot be written here, or None where it is kept."""
        return None if feature in self.features else self.dropped(feature)

    def dropped(self, feature: Feature) -> str:
        """Why a field cannot be written here, in one phrase."""
        return (
            f"{self.name} does not keep `{feature.field}` (feature gate {feature.value} is off; "
            "the API server drops the field without an error)"
        )

    def describe(self) -> dict[str, object]:
        """For logs, `report` and /metrics' info: the release and what it keeps."""
        return {
            "version": self.version or "unknown",
            "source": self.source,
            "resource_versions": list(self.resource_versions),
            "group_versions": list(self.group_versions),
            "device_taint_rules": list(self.taint_rules),
            "features": {f.value: f in self.features for f in Feature},
        }
