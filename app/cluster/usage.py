"""Devices and claims in use per namespace, kept current from cluster events.

The quota policy asks "how many devices of class C are claimed in namespace N" on every claim and
workload it admits. Scanning the namespace's claims each time would make admission cost grow with
the cluster; instead this index subscribes to the ClusterView and adjusts per-namespace totals by
the difference each added, changed or removed ResourceClaim makes.

What counts: every ResourceClaim, pending or allocated, except those being deleted (a
`deletionTimestamp` is set: the devices are on their way back). Devices are counted with the
rules of `app.k8s.claims`; claims with `allocationMode: All` are tracked apart, as their device
count is not known until allocation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from app.cluster.view import ClusterReader, Key, Kind, Obj, object_key
from app.errors import ObjectShapeError
from app.k8s.claim_count import EMPTY, ClaimCount, count_claim_spec
from app.k8s.claims import template_claim_spec

logger = logging.getLogger(__name__)

_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class _Share:
    """What one claim adds to its namespace's totals."""

    devices: tuple[tuple[str, int], ...]
    unbounded: tuple[str, ...]


_NOTHING = _Share((), ())


class ClaimUsage:
    """Per-namespace totals of ResourceClaims and their devices, by DeviceClass."""

    def __init__(self) -> None:
        self._shares: dict[Key, _Share] = {}
        self._devices: dict[str, dict[str, int]] = {}
        self._unbounded: dict[str, dict[str, int]] = {}
        self._claims: dict[str, int] = {}

    # -- reads -----------------------------------------------------------------------------

    def devices(self, namespace: str) -> Mapping[str, int]:
        """DeviceClass -> devices claimed in the namespace (bounded requests only)."""
        found = self._devices.get(namespace)
        return MappingProxyType(found) if found is not None else _EMPTY

    def devices_of(self, namespace: str, device_class: str) -> int:
        return self._devices.get(namespace, {}).get(device_class, 0)

    def unbounded_of(self, namespace: str, device_class: str) -> int:
        """Claims in the namespace asking for all devices of the class (allocationMode: All)."""
        return self._unbounded.get(namespace, {}).get(device_class, 0)

    def claims(self, namespace: str) -> int:
        """ResourceClaims in the namespace that are not being deleted."""
        return self._claims.get(namespace, 0)

    # -- updates (from the view) -----------------------------------------------------------

    def on_change(self, kind: Kind, old: Obj | None, new: Obj | None) -> None:
        """ClusterView listener."""
        if kind is not Kind.RESOURCE_CLAIM:
            return
        key = object_key(new if new is not None else old)  # type: ignore[arg-type]
        namespace = key[0]
        previous = self._shares.pop(key, None)
        if previous is not None:
            self._add(namespace, previous, -1)
        if new is None or _being_deleted(new):
            return
        share = _share(new, key)
        self._shares[key] = share
        self._add(namespace, share, +1)

    def _add(self, namespace: str, share: _Share, sign: int) -> None:
        _bump(self._claims, namespace, sign)
        if share.devices:
            totals = self._devices.setdefault(namespace, {})
            for device_class, amount in share.devices:
                _bump(totals, device_class, sign * amount)
            if not totals:
                del self._devices[namespace]
        if share.unbounded:
            totals = self._unbounded.setdefault(namespace, {})
            for device_class in share.unbounded:
                _bump(totals, device_class, sign)
            if not totals:
                del self._unbounded[namespace]


def _bump(totals: dict[str, int], key: str, delta: int) -> None:
    value = totals.get(key, 0) + delta
    if value:
        totals[key] = value
    else:
        totals.pop(key, None)


def _being_deleted(claim: Obj) -> bool:
    meta = claim.get("metadata")
    return isinstance(meta, dict) and bool(meta.get("deletionTimestamp"))


def _share(claim: Obj, key: Key) -> _Share:
    try:
        counted = count_claim_spec(claim.get("spec"))
    except ObjectShapeError as exc:
        # The API server validated it; a malformed one can only come from a hand-written file.
        logger.warning("claim not counted", extra={"claim": "/".join(key), "error": str(exc)})
        return _NOTHING
    return _Share(tuple(sorted(counted.devices.items())), tuple(sorted(counted.unbounded)))


class SliceNodes:
    """Nodes that publish devices (a ResourceSlice with `spec.nodeName`), counted incrementally.

    A DaemonSet makes one pod per node; the nodes publishing devices are the ones whose pods
    will hold any, which is the estimate the quota warning uses.
    """

    def __init__(self) -> None:
        self._slices_per_node: dict[str, int] = {}

    @property
    def count(self) -> int:
        return len(self._slices_per_node)

    def on_change(self, kind: Kind, old: Obj | None, new: Obj | None) -> None:
        """ClusterView listener."""
        if kind is not Kind.RESOURCE_SLICE:
            return
        if old is not None and (node := _node_name(old)):
            _bump(self._slices_per_node, node, -1)
        if new is not None and (node := _node_name(new)):
            _bump(self._slices_per_node, node, +1)


def _node_name(resource_slice: Obj) -> str | None:
    spec = resource_slice.get("spec")
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    return node if isinstance(node, str) and node else None


class TemplateCounts:
    """What each ResourceClaimTemplate asks for, counted once per template version.

    A pod that references a template is charged the template's devices; counting is done on the
    first lookup after the template changes, not on every pod. Malformed templates (only possible
    in a hand-written cluster file) count as nothing.
    """

    def __init__(self) -> None:
        self._counts: dict[Key, ClaimCount] = {}

    def on_change(self, kind: Kind, old: Obj | None, new: Obj | None) -> None:
        """ClusterView listener: forget the count of a changed or removed template."""
        if kind is Kind.RESOURCE_CLAIM_TEMPLATE:
            self._counts.pop(object_key(new if new is not None else old), None)  # type: ignore[arg-type]

    def get(self, view: ClusterReader, name: str, namespace: str) -> ClaimCount | None:
        """The count of a template in the view, or None when the view does not hold it."""
        key = (namespace, name)
        found = self._counts.get(key)
        if found is not None:
            return found
        template = view.get(Kind.RESOURCE_CLAIM_TEMPLATE, name, namespace)
        if template is None:
            return None
        try:
            found = count_claim_spec(*template_claim_spec(template))
        except ObjectShapeError:
            found = EMPTY
        self._counts[key] = found
        return found
