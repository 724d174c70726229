"""A small raw-JSON client for the control-plane tests (httpx over the kubeconfig's client cert).

Objects stay plain dicts, as the API server stored them: the `kubernetes` client's model classes
would drop fields they do not know (DESIGN.md). Warnings the API server passes on from admission
webhooks come back with every answer (the `Warning` headers kubectl prints).
"""

from __future__ import annotations

import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from tests.e2e.controlplane import ADMIN, ControlPlane

Obj = dict[str, Any]
T = TypeVar("T")
POLL = 0.1

_KINDS: dict[str, tuple[str, str, bool]] = {
    # kind: (API prefix, plural, namespaced)
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "PriorityClass": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Secret": ("/api/v1", "secrets", True),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", True),
    "Job": ("/apis/batch/v1", "jobs", True),
    "CronJob": ("/apis/batch/v1", "cronjobs", True),
    "DeviceClass": ("/apis/resource.k8s.io/v1", "deviceclasses", False),
    "ResourceSlice": ("/apis/resource.k8s.io/v1", "resourceslices", False),
    "ResourceClaim": ("/apis/resource.k8s.io/v1", "resourceclaims", True),
    "ResourceClaimTemplate": ("/apis/resource.k8s.io/v1", "resourceclaimtemplates", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicies",
        False,
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
}


class ApiError(Exception):
    """A non-2xx answer: its HTTP status and the Status message (an admission denial's text)."""

    def __init__(self, status: int, message: str, body: Obj) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.body = body


@dataclass
class Answer:
    obj: Obj
    warnings: list[str]


def _warning_text(header: str) -> str:
    """The text of a `Warning: 299 - "text"` header (RFC 7234 quoting), as kubectl prints it."""
    match = re.fullmatch(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"(?: .*)?', header)
    return re.sub(r"\\(.)", r"\1", match.group(1)) if match else header


def path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    prefix, plural, namespaced = _KINDS[kind]
    where = f"/namespaces/{namespace}" if namespaced and namespace else ""
    return f"{prefix}{where}/{plural}" + (f"/{name}" if name else "")


def _object_path(obj: Obj, named: bool = True) -> str:
    meta = obj["metadata"]
    return path(obj["kind"], meta.get("namespace"), meta["name"] if named else None)


class Kube:
    """Create, read, change and delete objects; wait for a condition by polling (0.1 s)."""

    def __init__(self, plane: ControlPlane, identity: str = ADMIN, timeout: float = 30) -> None:
        context = ssl.create_default_context(cafile=str(plane.pki.ca))
        context.load_cert_chain(plane.pki.cert(identity), plane.pki.key(identity))
        self.http = httpx.Client(base_url=plane.url, verify=context, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def _send(self, method: str, url: str, **kwargs: Any) -> Answer:
        response = self.http.request(method, url, **kwargs)
        warnings = [_warning_text(h) for h in response.headers.get_list("warning")]
        body: Obj = response.json() if response.content else {}
        if response.status_code >= 300:
            raise ApiError(response.status_code, str(body.get("message", "")), body)
        return Answer(body, warnings)

    def create(self, obj: Obj, *, dry_run: bool = False) -> Answer:
        params = {"dryRun": "All"} if dry_run else {}
        return self._send("POST", _object_path(obj, named=False), json=obj, params=params)

    def install_crd(self, crd: Obj) -> None:
        """Create a CustomResourceDefinition (unless it exists) and wait until it is served."""
        url = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
        if self.http.get(url).status_code == 404:
            answer = self.http.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd
            )
            assert answer.status_code == 201, answer.text

        def established() -> bool | None:
            conditions = (self.http.get(url).json().get("status") or {}).get("conditions") or []
            return (
                any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
                or None
            )

        self.wait(established, f"CRD {crd['metadata']['name']} established")

    def create_custom(self, obj: Obj, plural: str, *, dry_run: bool = False) -> Answer:
        """Create a namespaced custom resource of `plural` (its apiVersion names the group)."""
        where = f"/apis/{obj['apiVersion']}/namespaces/{obj['metadata']['namespace']}/{plural}"
        params = {"dryRun": "All"} if dry_run else {}
        return self._send("POST", where, json=obj, params=params)

    def apply(self, obj: Obj) -> Obj:
        """Create, or replace what is there (keeping its resourceVersion)."""
        try:
            return self.create(obj).obj
        except ApiError as error:
            if error.status != 409:
                raise
        current = self.get(obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))
        obj = {
            **obj,
            "metadata": {
                **obj["metadata"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
        }
        return self._send("PUT", _object_path(obj), json=obj).obj

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        return self._send("GET", path(kind, namespace, name)).obj

    def find(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self.get(kind, name, namespace)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None, **params: str) -> list[Obj]:
        items: list[Obj] = self._send("GET", path(kind, namespace), params=params).obj["items"]
        return items

    def patch(
        self, kind: str, name: str, namespace: str | None, body: Obj, subresource: str = ""
    ) -> Obj:
        url = path(kind, namespace, name) + (f"/{subresource}" if subresource else "")
        headers = {"content-type": "application/merge-patch+json"}
        return self._send("PATCH", url, json=body, headers=headers).obj

    def delete(
        self, kind: str, name: str, namespace: str | None = None, *, now: bool = False
    ) -> None:
        """Delete; `now` skips the grace period (no kubelet will ever confirm a pod's end)."""
        body = {"gracePeriodSeconds": 0, "propagationPolicy": "Background"} if now else None
        try:
            self._send("DELETE", path(kind, namespace, name), json=body)
        except ApiError as error:
            if error.status != 404:
                raise

    def delete_at(self, url: str) -> None:
        """Delete the object at `url` (a kind `path` does not know); gone already is fine."""
        try:
            self._send("DELETE", url)
        except ApiError as error:
            if error.status != 404:
                raise

    def namespace(self, name: str, **labels: str) -> str:
        """A namespace, once its `default` ServiceAccount exists (pods are refused before)."""
        meta = {"name": name, "labels": labels}
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        self.wait(
            lambda: self.find("ServiceAccount", "default", name), f"ServiceAccount {name}/default"
        )
        return name

    def wait(self, fetch: Callable[[], T | None], what: str, timeout: float = 30) -> T:
        """Poll `fetch` until it returns something truthy; fail naming `what`."""
        deadline = time.monotonic() + timeout
        while True:
            found = fetch()
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(POLL)


_GROUPS = {"PodGroup": "podgroups", "Workload": "workloads"}  # scheduling.k8s.io, 1.36 on


def release_devices(kube: Kube, namespace: str, timeout: float = 30) -> None:
    """Delete what holds devices in `namespace` and wait until no claim is left there."""
    for kind in ("CronJob", "Job", "Deployment", "ReplicaSet"):
        for obj in kube.list(kind, namespace):
            kube.delete(kind, obj["metadata"]["name"], namespace)
    for obj in kube.list("Pod", namespace):
        kube.delete("Pod", obj["metadata"]["name"], namespace, now=True)
    for obj in kube.list("ResourceClaim", namespace):
        # a Workload's or PodGroup's claim is made again while its group exists: delete the group
        for owner in obj["metadata"].get("ownerReferences", ()):
            if owner["kind"] in _GROUPS:
                where = f"/apis/{owner['apiVersion']}/namespaces/{namespace}"
                kube.delete_at(f"{where}/{_GROUPS[owner['kind']]}/{owner['name']}")
        kube.delete("ResourceClaim", obj["metadata"]["name"], namespace)
    kube.wait(
        lambda: not kube.list("ResourceClaim", namespace) or None,
        f"the claims of {namespace} to be released",
        timeout,
    )
