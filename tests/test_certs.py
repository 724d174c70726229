"""Minting certificates and reloading rotated ones under a running server."""

from __future__ import annotations

import ipaddress
import ssl
import threading
import time
from pathlib import Path

import pytest
from cryptography import x509

from app.certs import CertReloader, ensure_dev_certs, mint
from tests.helpers import TlsServer, load_fixture, start_server, stop_server


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_minted_serving_cert_has_the_sans_asked_for_plus_localhost(tmp_path: Path) -> None:
    minted = mint(tmp_path, ("dra-webhook.gpu.svc",), ("10.0.0.7",))
    cert = _cert(tmp_path / "tls.crt")
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["dra-webhook.gpu.svc", "localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.7"),
        ipaddress.ip_address("127.0.0.1"),
    ]
    cert.verify_directly_issued_by(_cert(tmp_path / "ca.crt"))
    assert minted.serial == cert.serial_number
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0
    assert (tmp_path / "ca.key").stat().st_mode & 0o077 == 0


def test_minting_again_keeps_the_ca_so_the_ca_bundle_stays_valid(tmp_path: Path) -> None:
    first = mint(tmp_path)
    second = mint(tmp_path)
    assert first.ca_bundle == second.ca_bundle
    assert first.serial != second.serial


def test_dev_certs_are_minted_only_when_absent(tmp_path: Path) -> None:
    assert ensure_dev_certs(tmp_path) is True
    assert ensure_dev_certs(tmp_path) is False


def test_the_reloader_builds_a_new_context_only_when_the_files_change(tmp_path: Path) -> None:
    mint(tmp_path)
    reloader = CertReloader(tmp_path, interval=0.0001)
    time.sleep(0.001)
    assert reloader.maybe_reload() is None
    mint(tmp_path)
    time.sleep(0.001)
    assert isinstance(reloader.maybe_reload(), ssl.SSLContext)
    assert reloader.reloads == 1


def test_a_half_written_rotation_keeps_serving_the_old_pair(tmp_path: Path) -> None:
    mint(tmp_path)
    reloader = CertReloader(tmp_path, interval=0.0001)
    (tmp_path / "tls.key").write_text("not a key")
    time.sleep(0.001)
    assert reloader.maybe_reload() is None
    assert reloader.reloads == 0


def _served_serial(server: TlsServer) -> int:
    ctx = ssl.create_default_context(cafile=server.ca)
    host, port = "127.0.0.1", int(server.base_url.rsplit(":", 1)[1])
    import socket

    with (
        socket.create_connection((host, port), timeout=5) as sock,
        ctx.wrap_socket(sock, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


@pytest.mark.slow
def test_rotated_certificate_files_are_served_without_restart_or_failed_request(
    tmp_path: Path,
) -> None:
    cert_dir = tmp_path / "certs"
    first = mint(cert_dir)
    server = start_server(
        tmp_path, cert_dir=cert_dir, env={"DRA_WEBHOOK_CERT_RELOAD_INTERVAL_SECONDS": "0.2"}
    )
    failures: list[str] = []
    answered = 0
    stop = threading.Event()

    def hammer() -> None:
        nonlocal answered
        body = load_fixture("pod-create-legacy-gpu")
        while not stop.is_set():
            # a fresh connection each time, so every request makes a new handshake
            with server.client() as client:
                http = client.post("/validate", json=body)
            if http.status_code != 200 or http.json()["response"]["allowed"] is not False:
                failures.append(http.text)
            answered += 1

    try:
        assert _served_serial(server) == first.serial
        worker = threading.Thread(target=hammer)
        worker.start()
        time.sleep(0.3)
        second = mint(cert_dir)
        deadline = time.monotonic() + 5
        while _served_serial(server) != second.serial:
            assert time.monotonic() < deadline, "rotated certificate never served"
            time.sleep(0.1)
        time.sleep(0.3)
        stop.set()
        worker.join(10)
        assert server.process.poll() is None
    finally:
        stop.set()
        stop_server(server)
    assert failures == []
    assert answered > 5
