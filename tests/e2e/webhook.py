"""The webhook under test: `dra-webhook serve --kubeconfig` registered from the Helm chart.

What the chart renders is what the API server gets, with nothing written by hand:

1. `helm template` of the ServiceAccount, ClusterRole, ClusterRoleBinding and policy ConfigMap
   (tests/e2e/values.yaml over the chart's defaults); the RBAC objects are applied as rendered,
   and the ConfigMap's policy.yaml is the file the process reads;
2. the process runs with the control plane's *webhook* identity, which the chart's binding names
   (system:serviceaccount:dra-webhook:dra-webhook): its only permissions are docs/rbac.md's
   ClusterRole, so a missing verb shows up as a stale view or a failed template create;
3. once it is ready, `helm template --show-only templates/webhooks.yaml` with `webhook.url` and
   `webhook.caBundle` (the CA of the certificates minted for it) gives the two webhook
   configurations, applied as rendered: the real API server evaluates their namespaceSelector,
   rules and matchConditions; `templates/admissionpolicy.yaml` gives the ValidatingAdmissionPolicy
   that enforces the dra-only rule in the API server, and its bindings.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from app.certs import mint
from tests.dra_only_cases import EXCEPTIONS
from tests.e2e.controlplane import WEBHOOK, ControlPlane
from tests.e2e.kube import ApiError, Kube
from tests.helpers import TlsServer, start_server, stop_server

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "dra-webhook"
VALUES = Path(__file__).with_name("values.yaml")
RELEASE = NAMESPACE = "dra-webhook"
ENV = {
    "DRA_WEBHOOK_NAMESPACE": NAMESPACE,
    # an API server outage shows in /readyz after 2 s, and the view reconnects within a second
    "DRA_WEBHOOK_STALE_AFTER_SECONDS": "2",
    "DRA_WEBHOOK_BACKOFF_INITIAL_SECONDS": "0.1",
    "DRA_WEBHOOK_BACKOFF_MAX_SECONDS": "1",
    "DRA_WEBHOOK_LOG_LEVEL": "INFO",
}
Obj = dict[str, Any]


def render(helm: str, *args: str) -> list[Obj]:
    """The chart over tests/e2e/values.yaml, with the policy exceptions of the shared dra-only
    table (tests/dra_only_cases.py EXCEPTIONS)."""
    exceptions = f"--set-json=policy.exceptions={json.dumps(EXCEPTIONS)}"
    result = subprocess.run(
        [helm, "template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(VALUES), exceptions,
         *args],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"helm template failed: {result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def token_kubeconfig(plane: ControlPlane, kube: Kube, account: str, folder: Path) -> Path:
    """A kubeconfig for ServiceAccount `account` in the release namespace, by TokenRequest."""
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    meta = {"name": account, "namespace": NAMESPACE}
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    answer = kube.http.post(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert answer.status_code == 201, answer.text
    config = yaml.safe_load(plane.kubeconfig().read_text())
    config["users"][0]["user"] = {"token": answer.json()["status"]["token"]}
    path = folder / f"{account}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Webhook:
    server: TlsServer
    configurations: list[Obj]
    policy: Path

    def get(self, path: str) -> tuple[int, str]:
        with self.server.client() as client:
            answer = client.get(path)
        return answer.status_code, answer.text

    def readyz(self) -> int:
        try:
            return self.get("/readyz")[0]
        except OSError:
            return 0

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples whose labels include `labels` (0 when absent)."""
        total = 0.0
        for line in self.get("/metrics")[1].splitlines():
            match = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$", line)
            if not match or match.group(1) != name:
                continue
            found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(match.group(3))
        return total

    def reviews(self) -> float:
        """Reviews answered so far, on both endpoints."""
        return self.metric("dra_webhook_admission_duration_seconds_count")


def start_webhook(
    plane: ControlPlane,
    kube: Kube,
    helm: str,
    workdir: Path,
    *,
    register: bool = True,
    ready_timeout: float = 20,
    spawned: Callable[[TlsServer], None] | None = None,
) -> Webhook:
    """Permissions and policy from the chart, the process, then (register) its configurations.

    `ready_timeout` bounds the wait for /readyz and, once registered, for the API server to call
    the webhook; `spawned` is called as soon as the process exists (tests.helpers.start_server).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    policy = workdir / "policy.yaml"
    if not policy.exists():
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        shown = ("serviceaccount", "rbac", "configmap")
        for doc in render(helm, *(f"--show-only=templates/{name}.yaml" for name in shown)):
            if doc["kind"] == "ConfigMap":
                policy.write_text(doc["data"]["policy.yaml"])
            else:
                kube.apply(doc)
    server = start_server(
        workdir,
        "--kubeconfig", str(plane.kubeconfig(WEBHOOK)), "--config", str(policy),
        cert_dir=_certs(workdir / "certs"), env=ENV, ready_timeout=ready_timeout, spawned=spawned,
    )  # fmt: skip
    ca_bundle = base64.b64encode((server.cert_dir / "ca.crt").read_bytes()).decode()
    configurations = render(
        helm,
        "--show-only=templates/webhooks.yaml",
        "--show-only=templates/admissionpolicy.yaml",
        f"--set=webhook.url={server.base_url}",
        f"--set=webhook.caBundle={ca_bundle}",
    )
    webhook = Webhook(server, configurations, policy)
    if register:
        for doc in configurations:
            kube.apply(doc)
        _wait_until_called(kube, webhook, max(30, ready_timeout))
    return webhook


def stop_webhook(webhook: Webhook) -> None:
    stop_server(webhook.server)


def _certs(folder: Path) -> Path:
    if not (folder / "tls.crt").exists():
        mint(folder)
    return folder


def _wait_until_called(kube: Kube, webhook: Webhook, timeout: float = 30) -> None:
    """The API server picks up new configurations and policies from its informers: wait until a
    dry-run legacy pod comes back translated by this webhook in a translate namespace, and
    denied by the chart's ValidatingAdmissionPolicy in a dra-only one."""
    name = "e2e-webhook-probe"
    translate = f"{name}-translate"
    kube.namespace(name, **{"gpu-mode": "dra-only"})
    kube.namespace(translate, **{"gpu-mode": "translate"})

    def pod(namespace: str) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": "1"}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": namespace},
            "spec": {
                "containers": [{"name": "c", "image": "pause", "resources": {"limits": limits}}]
            },
        }

    def translated() -> bool:
        return bool(kube.create(pod(translate), dry_run=True).obj["spec"].get("resourceClaims"))

    def denied() -> bool:
        try:
            kube.create(pod(name), dry_run=True)
        except ApiError as error:
            return "ValidatingAdmissionPolicy" in error.message and "dra-webhook" in error.message
        return False

    probes = [(translated, "webhook configurations")]
    if any(doc["kind"] == "ValidatingAdmissionPolicy" for doc in webhook.configurations):
        probes.append((denied, "ValidatingAdmissionPolicy"))
    deadline = time.monotonic() + timeout
    for probe, what in probes:
        while not probe():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the API server never applied the chart's {what}: "
                    f"{webhook.server.log.read_text()[-3000:]}"
                )
            time.sleep(0.2)
