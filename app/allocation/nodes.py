"""Which nodes a ResourceSlice (or one of its devices) reaches, without the Node objects.

Mirrors ``NodeMatches`` of upstream's ``GatherPools`` (k8s.io/dynamic-resource-allocation/
structured): ``nodeName``, ``allNodes`` or ``nodeSelector``. The view holds no Node objects, so a
node selector on labels other than the node's name cannot be evaluated: it is taken to match
(see :mod:`app.allocation.inventory`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["ANY_NODE", "named", "raw_devices", "reaches", "slice_reaches"]

ANY_NODE: Final = ""
"""The anonymous node: any node no slice names (it sees allNodes and unevaluable selectors)."""
HOSTNAME: Final = "kubernetes.io/hostname"


def raw_devices(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    devices = spec.get("devices")
    if not isinstance(devices, list):
        return []
    return [
        d.get("basic", d) if isinstance(d.get("basic"), Mapping) else d
        for d in devices
        if isinstance(d, Mapping)
    ]


def slice_reaches(spec: Mapping[str, Any], node: str) -> bool:
    if spec.get("perDeviceNodeSelection") is True:
        return any(reaches(d, node) for d in raw_devices(spec))
    return reaches(spec, node)


def reaches(holder: Mapping[str, Any], node: str) -> bool:
    """``NodeMatches`` for a slice or a device, without the Node's labels (see the module)."""
    name = holder.get("nodeName")
    if isinstance(name, str) and name:
        return name == node
    if holder.get("allNodes") is True:
        return True
    selector = holder.get("nodeSelector")
    if isinstance(selector, Mapping):
        return _selector_matches(selector, node) is not False
    return False


def _selector_matches(selector: Mapping[str, Any], node: str) -> bool | None:
    """True, False, or None when it depends on labels the view does not have."""
    terms = selector.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        return False
    results = [_term_matches(t, node) for t in terms if isinstance(t, Mapping)]
    if True in results:
        return True
    return None if None in results else False


def _term_matches(term: Mapping[str, Any], node: str) -> bool | None:
    outcome: bool | None = True
    for group, known in (("matchFields", "metadata.name"), ("matchExpressions", HOSTNAME)):
        for requirement in term.get(group) or ():
            if not isinstance(requirement, Mapping):
                continue
            operator = requirement.get("operator")
            if requirement.get("key") != known or operator not in ("In", "NotIn"):
                outcome = None
                continue
            # the anonymous node is none of the named ones
            found = node != ANY_NODE and node in (requirement.get("values") or ())
            if found != (operator == "In"):
                return False
    return outcome


def named(holder: Mapping[str, Any]) -> Iterable[str]:
    name = holder.get("nodeName")
    if isinstance(name, str) and name:
        yield name
    selector = holder.get("nodeSelector")
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    for term in terms if isinstance(terms, list) else ():
        if not isinstance(term, Mapping):
            continue
        for group, known in (("matchFields", "metadata.name"), ("matchExpressions", HOSTNAME)):
            for requirement in term.get(group) or ():
                if (
                    isinstance(requirement, Mapping)
                    and requirement.get("key") == known
                    and requirement.get("operator") == "In"
                ):
                    yield from (v for v in requirement.get("values") or () if isinstance(v, str))
