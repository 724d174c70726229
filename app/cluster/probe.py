"""Learn the release the API server runs and which DRA fields it keeps (app.cluster.release).

Reads and two writes that store nothing:

1. `GET /version`: the release (`gitVersion`).
2. `GET /apis/resource.k8s.io`: the served versions, and each version's resource list: which
   of them serve DeviceTaintRule (`ServedRelease.taint_rules`); `GET /apis/scheduling.k8s.io`
   and each of its versions that can carry group claims (`GROUP_CLAIM_VERSIONS`): which serve
   PodGroups (the API is gated and off by default, so discovery is the only truth).
3. A server-side dry-run create (`dryRun=All`) of a ResourceClaimTemplate in the webhook's own
   namespace whose first request asks for a consumable capacity and tolerates a taint, and whose
   second is a `firstAvailable` list: the object the API server answers with is what it would
   store, so a field missing from it is a field the release drops. The webhook may already create
   templates (translation), so this needs no permission it lacks; its own namespace is exempt
   from its own webhook configurations, so the dry run does not call back into it.
4. The same with `adminAccess: true`: kept (or refused because the namespace lacks the
   admin-access label, which only a release that keeps the field checks) means on.

No gate list is guessed from the version number: the defaults table is only the fallback when
the dry runs cannot be made (not granted, the namespace missing), and the answer says so
(`source`).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from app.cluster.api import Api, api_path, status_text
from app.cluster.release import (
    GROUP_CLAIM_VERSIONS,
    PROBED,
    SCHEDULING,
    Feature,
    ServedRelease,
    parse_minor,
)

logger = logging.getLogger(__name__)

PROBE_NAME = "dra-webhook-release-probe"
_PROBE_CLASS = "dra-webhook-release-probe.example.com"


def _template(namespace: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": PROBE_NAME, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


def fields_probe(namespace: str) -> dict[str, Any]:
    """The probe template for capacity, tolerations and firstAvailable."""
    return _template(
        namespace,
        [
            {
                "name": "shares",
                "exactly": {
                    "deviceClassName": _PROBE_CLASS,
                    "capacity": {"requests": {"memory": "1Mi"}},
                    "tolerations": [{"key": "example.com/probe", "operator": "Exists"}],
                },
            },
            {
                "name": "alternatives",
                "firstAvailable": [{"name": "first", "deviceClassName": _PROBE_CLASS}],
            },
        ],
    )


def admin_probe(namespace: str) -> dict[str, Any]:
    """The probe template for adminAccess."""
    return _template(
        namespace,
        [{"name": "admin", "exactly": {"deviceClassName": _PROBE_CLASS, "adminAccess": True}}],
    )


def kept_fields(stored: dict[str, Any]) -> set[Feature]:
    """Which of the fields probe's features survived in the dry-run answer."""
    spec = stored.get("spec")
    inner = spec.get("spec") if isinstance(spec, dict) else None
    devices = inner.get("devices") if isinstance(inner, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    kept: set[Feature] = set()
    for request in requests if isinstance(requests, list) else ():
        if not isinstance(request, dict):
            continue
        exactly = request.get("exactly")
        if isinstance(exactly, dict):
            capacity = exactly.get("capacity")
            if isinstance(capacity, dict) and capacity.get("requests"):
                kept.add(Feature.CONSUMABLE_CAPACITY)
            if exactly.get("tolerations"):
                kept.add(Feature.DEVICE_TAINTS)
            if exactly.get("adminAccess") is True:
                kept.add(Feature.ADMIN_ACCESS)
        if request.get("firstAvailable"):
            kept.add(Feature.PRIORITIZED_LIST)
    return kept


def _mentions_admin_access(status: int, body: bytes) -> bool:
    """A refusal of the admin probe because of the namespace label: the field was kept."""
    return status in (403, 422) and b"admin" in body.lower()


class ProbeError(Exception):
    """The release could not be learned at all (no /version): try again later."""


async def probe(api: Api, namespace: str, timeout: float, *, dry_run: bool = True) -> ServedRelease:
    """What the API server runs and keeps. Raises ProbeError when /version cannot be read;
    a dry run that cannot be made (or, `dry_run=False`, is not made: the report, whose role
    holds no write but its PolicyReports) falls back to the release's defaults, said in
    `source`."""
    status, body = await api.request("GET", "/version", timeout=timeout)
    version = _git_version(status, body)
    resource_versions = await _resource_versions(api, timeout)
    groups = await group_versions(api, timeout)
    taint_rules = await _taint_rule_versions(api, resource_versions, timeout)
    served = {"group_versions": groups, "taint_rules": taint_rules}
    if not dry_run:
        defaults = ServedRelease.from_defaults(version)
        return ServedRelease(
            version, defaults.features, resource_versions, "release defaults", **served
        )
    collection = api_path(
        "apis", "resource.k8s.io", "v1", "namespaces", namespace, "resourceclaimtemplates"
    )
    query = [("dryRun", "All")]
    status, body = await api.request(
        "POST", collection, query=query, body=fields_probe(namespace), timeout=timeout
    )
    if status not in (200, 201):
        why = f"dry run: {status_text(status, body)}"
        return _fallback(version, resource_versions, why, served)
    kept = kept_fields(_object(body))
    status, body = await api.request(
        "POST", collection, query=query, body=admin_probe(namespace), timeout=timeout
    )
    if status in (200, 201):
        kept |= kept_fields(_object(body)) & {Feature.ADMIN_ACCESS}
    elif _mentions_admin_access(status, body):
        kept.add(Feature.ADMIN_ACCESS)
    else:
        why = f"dry run: {status_text(status, body)}"
        return _fallback(version, resource_versions, why, served)
    defaults = ServedRelease.from_defaults(version)
    read_off = defaults.features - set(PROBED)  # shown by objects the view holds, not probed
    features = frozenset(kept) | read_off
    return ServedRelease(version, features, resource_versions, "probed", **served)


def _fallback(
    version: str,
    resource_versions: tuple[str, ...],
    why: str,
    served: dict[str, tuple[str, ...]],
) -> ServedRelease:
    logger.warning(
        "release probe: %s; taking %s's default features (docs/control-plane.md)",
        why,
        version,
        extra={"version": version},
    )
    defaults = ServedRelease.from_defaults(version)
    return ServedRelease(
        version, defaults.features, resource_versions, f"release defaults ({why})", **served
    )


def _git_version(status: int, body: bytes) -> str:
    if status != 200:
        raise ProbeError(f"GET /version: {status_text(status, body)}")
    found = _object(body)
    version = found.get("gitVersion")
    if not isinstance(version, str) or parse_minor(version) is None:
        raise ProbeError(f"GET /version answered no Kubernetes 1.x gitVersion: {version!r}")
    return version


async def _resource_versions(api: Api, timeout: float) -> tuple[str, ...]:
    status, body = await api.request("GET", "/apis/resource.k8s.io", timeout=timeout)
    if status != 200:
        return ()
    versions = _object(body).get("versions")
    if not isinstance(versions, list):
        return ()
    return tuple(
        v["version"] for v in versions if isinstance(v, dict) and isinstance(v.get("version"), str)
    )


async def group_versions(api: Api, timeout: float) -> tuple[str, ...]:
    """The `scheduling.k8s.io` versions that serve PodGroups, newest first: of those some
    release gives group claims (`GROUP_CLAIM_VERSIONS`), the ones discovery lists with a
    `podgroups` resource (a version on in `--runtime-config` serves none while the
    GenericWorkload gate is off)."""
    status, body = await api.request("GET", api_path("apis", SCHEDULING), timeout=timeout)
    if status != 200:
        return ()
    listed = _object(body).get("versions")
    offered = {
        v["version"]
        for v in (listed if isinstance(listed, list) else ())
        if isinstance(v, dict) and isinstance(v.get("version"), str)
    }
    known = dict.fromkeys(v for row in GROUP_CLAIM_VERSIONS.values() for v in row)
    found = []
    for version in sorted(known, key=_newest_first):
        if version not in offered:
            continue
        status, body = await api.request(
            "GET", api_path("apis", SCHEDULING, version), timeout=timeout
        )
        resources = _object(body).get("resources") if status == 200 else None
        if any(
            isinstance(r, dict) and r.get("name") == "podgroups"
            for r in (resources if isinstance(resources, list) else ())
        ):
            found.append(version)
    return tuple(found)


async def _taint_rule_versions(
    api: Api, versions: tuple[str, ...], timeout: float
) -> tuple[str, ...]:
    """The served versions whose resource list has `devicetaintrules` (discovery, which every
    authenticated user may read): a gate or `--runtime-config` decides, not the release."""
    found: list[str] = []
    for version in versions:
        status, body = await api.request("GET", f"/apis/resource.k8s.io/{version}", timeout=timeout)
        resources = _object(body).get("resources") if status == 200 else None
        if isinstance(resources, list) and any(
            isinstance(r, dict) and r.get("name") == "devicetaintrules" for r in resources
        ):
            found.append(version)
    return tuple(found)


def _newest_first(version: str) -> tuple[int, int, int]:
    """v1 before v1beta1 before v1alpha3 before v1alpha2."""
    major, _, rest = version.removeprefix("v").partition("alpha")
    if rest:
        return (-int(major), 2, -int(rest))
    major, _, rest = version.removeprefix("v").partition("beta")
    return (-int(major), 1 if rest else 0, -int(rest or 0))


def _object(body: bytes) -> dict[str, Any]:
    try:
        found = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return found if isinstance(found, dict) else {}
