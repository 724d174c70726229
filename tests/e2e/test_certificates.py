"""Journey certificates: the webhook makes, rotates and serves its own certificates
(certificates.mode: managed, the chart's default) and the API server keeps calling it.

A release of its own (`dra-webhook-certs`, so the session's webhook is not touched) with the
chart's RBAC, empty Secret and Lease, served by `dra-webhook serve --kubeconfig` with the
webhook's identity, and certificates that live 20 s (renewed with a third left, unready with a
sixth left): its configurations are applied with no caBundle, and the server writes it.
"""

from __future__ import annotations

import base64
import datetime as dt
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography import x509

from tests.e2e.controlplane import WEBHOOK, ControlPlane
from tests.e2e.kube import ApiError, Kube
from tests.e2e.webhook import ENV, NAMESPACE, render
from tests.helpers import TlsServer, start_server, stop_server

pytestmark = pytest.mark.journey("certificates")

FULLNAME = "dra-webhook-certs"
MANAGED = f"{FULLNAME}-certs"
LIFETIME = 20.0
RELEASE_ARGS = (f"--set=fullnameOverride={FULLNAME}", f"--set=serviceAccount.name={NAMESPACE}")
CONFIGURATIONS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _served(server: TlsServer) -> x509.Certificate | None:
    """The certificate the server presents, unverified; None when the handshake is refused."""
    url = urlsplit(server.base_url)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((url.hostname, url.port), timeout=5) as raw,
            context.wrap_socket(raw) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except (ssl.SSLError, OSError):
        return None
    return x509.load_der_x509_certificate(der) if der else None


def _readyz(server: TlsServer, kube: Kube) -> tuple[int, str]:
    """/readyz's status and body; 0 when no answer (a refused handshake). The server is trusted
    as the API server trusts it: through the configurations' caBundles as they are now (the
    new CA and the one it replaces), not the ca.crt file the server rewrites while it rotates."""
    pem = "".join(base64.b64decode(bundle).decode() for bundle in _bundles(kube) if bundle)
    try:
        context = ssl.create_default_context(cadata=pem)
        with httpx.Client(base_url=server.base_url, verify=context, timeout=10) as client:
            answer = client.get("/readyz")
    except (OSError, ValueError, httpx.TransportError):  # ssl.SSLError is an OSError
        return 0, ""
    return answer.status_code, answer.text


def _bundles(kube: Kube) -> set[str]:
    return {
        webhook["clientConfig"].get("caBundle", "")
        for kind in CONFIGURATIONS
        for webhook in kube.get(kind, FULLNAME)["webhooks"]
    }


def _translated(kube: Kube, namespace: str) -> bool:
    """A dry-run legacy pod, created through the API server, comes back translated."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "rotating", "namespace": namespace},
        "spec": {
            "containers": [
                {"name": "c", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }
    return bool(kube.create(pod, dry_run=True).obj["spec"].get("resourceClaims"))


@pytest.fixture
def managed(
    control_plane: ControlPlane, kube: Kube, helm: str, fleet: None, tmp_path: Path
) -> Iterator[TlsServer]:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    shown = ("serviceaccount", "rbac", "configmap", "managedcertificates")
    policy = tmp_path / "policy.yaml"
    for doc in render(helm, *RELEASE_ARGS, *(f"--show-only=templates/{n}.yaml" for n in shown)):
        if doc["kind"] == "ConfigMap":
            policy.write_text(doc["data"]["policy.yaml"])
        else:
            kube.apply(doc)
    env = {
        **ENV,
        "DRA_WEBHOOK_MANAGED_CERTS_SECRET": MANAGED,
        "DRA_WEBHOOK_MANAGED_CERTS_LEASE": MANAGED,
        "DRA_WEBHOOK_MANAGED_CERTS_WEBHOOK": FULLNAME,
        "DRA_WEBHOOK_MANAGED_CERTS_LIFETIME_SECONDS": str(LIFETIME),
        "DRA_WEBHOOK_MANAGED_CERTS_SYNC_SECONDS": "1",
        "DRA_WEBHOOK_MANAGED_CERTS_LEASE_SECONDS": "5",
        "DRA_WEBHOOK_CERT_RELOAD_INTERVAL_SECONDS": "0.2",
    }
    (tmp_path / "certs").mkdir()
    server = start_server(
        tmp_path,
        "--kubeconfig", str(control_plane.kubeconfig(WEBHOOK)), "--config", str(policy),
        cert_dir=tmp_path / "certs", env=env, ready_timeout=60,
    )  # fmt: skip
    try:
        for doc in render(
            helm, *RELEASE_ARGS, "--show-only=templates/webhooks.yaml",
            f"--set=webhook.url={server.base_url}",
        ):  # fmt: skip
            assert "caBundle" not in str(doc)
            kube.apply(doc)
        yield server
    finally:
        for kind in CONFIGURATIONS:
            kube.delete(kind, FULLNAME)
        stop_server(server)


def _answered(kube: Kube, namespace: str) -> bool:
    """`_translated`, with a refused call (no caBundle yet, an untrusted certificate) as False."""
    try:
        return _translated(kube, namespace)
    except ApiError:
        return False


def _until(check: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_the_webhook_rotates_its_certificate_and_the_api_server_keeps_calling_it(
    managed: TlsServer, kube: Kube, namespace: Callable[..., str]
) -> None:
    translate = namespace("translate")
    _until(lambda: "" not in _bundles(kube), "the caBundle was never written", 15)
    _until(lambda: _answered(kube, translate), "the API server never called the webhook", 30)

    first_bundles, first_cert = _bundles(kube), _served(managed)
    assert first_cert is not None
    served = {first_cert.serial_number}
    bundles = set(first_bundles)
    deadline = time.monotonic() + LIFETIME * 1.5
    while time.monotonic() < deadline:  # through at least one rotation: every call succeeds
        assert _translated(kube, translate)
        assert _readyz(managed, kube)[0] == 200
        cert = _served(managed)
        assert cert is not None
        assert cert.not_valid_after_utc > dt.datetime.now(dt.UTC)
        served.add(cert.serial_number)
        bundles |= _bundles(kube)
        time.sleep(0.5)
    assert len(served) >= 2, "the serving certificate was never rotated"
    assert len(bundles) >= 2, "the caBundle never changed"
    secret = kube.get("Secret", MANAGED, NAMESPACE)
    assert set(secret["data"]) >= {"ca.crt", "ca.key", "tls.crt", "tls.key", "ca-bundle.crt"}
    lease = kube.get("Lease", MANAGED, NAMESPACE)
    assert lease["spec"]["holderIdentity"]


def test_an_outage_of_the_rotation_turns_the_webhook_unready_and_never_serves_it_expired(
    managed: TlsServer, kube: Kube, namespace: Callable[..., str]
) -> None:
    translate = namespace("translate")
    _until(lambda: _answered(kube, translate), "the API server never called the webhook", 30)
    binding = kube.get("RoleBinding", MANAGED, NAMESPACE)
    kube.delete("RoleBinding", MANAGED, NAMESPACE)  # no more Secret or Lease: no renewal
    try:
        # the rotation that may be under way lands; after that nothing changes any more
        time.sleep(3)
        cert = _served(managed)
        assert cert is not None
        expires = cert.not_valid_after_utc
        _until(
            lambda: _readyz(managed, kube)[0] == 503 or dt.datetime.now(dt.UTC) >= expires,
            "never unready",
            LIFETIME + 5,
        )
        assert dt.datetime.now(dt.UTC) < expires, "still ready when the certificate expired"
        status, body = _readyz(managed, kube)
        assert status == 503
        assert "certificate" in body
        while dt.datetime.now(dt.UTC) < expires + dt.timedelta(seconds=1):
            time.sleep(0.2)
        # every new handshake is refused (a connection opened before the expiry, as the API
        # server's keep-alive ones, keeps the session it agreed then, as with any TLS server)
        assert _served(managed) is None, "an expired certificate was served"
    finally:
        kube.apply({**binding, "metadata": {"name": MANAGED, "namespace": NAMESPACE}})
    # the grant is back: a new pair, the API server trusts it, the webhook is ready again
    _until(lambda: _readyz(managed, kube)[0] == 200, "never ready again", 20)
    _until(lambda: _answered(kube, translate), "the API server never called it again", 20)
