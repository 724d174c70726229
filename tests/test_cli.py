"""The dra-webhook command line."""

from __future__ import annotations

import base64
import errno
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from app.cli import main
from tests.helpers import ANY_PORTS, load_fixture, start_server


def test_certs_writes_the_cert_manager_file_names_and_prints_the_ca_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["certs", "--out", str(tmp_path), "--dns", "svc.ns.svc"]) == 0
    bundle = capsys.readouterr().out.strip()
    assert base64.b64decode(bundle) == (tmp_path / "ca.crt").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "{dir}/policy.yaml"], "namespaceModes.label"),
        (["--cluster-file", "{dir}/missing.yaml"], "missing.yaml"),
    ],
)
def test_serve_refuses_bad_configuration_with_a_plain_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    (tmp_path / "policy.yaml").write_text("namespaceModes: {label: 7}\n")
    code = main(
        ["serve", "--cert-dir", str(tmp_path / "c")] + [a.format(dir=tmp_path) for a in args]
    )
    assert code == 2
    assert message in capsys.readouterr().err


def test_serve_names_the_cert_dir_it_cannot_write_and_the_flag_that_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def read_only(directory: Path) -> bool:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(directory))

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("app.cli.serve.ensure_dev_certs", read_only)
    assert main(["serve", *ANY_PORTS]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"dra-webhook: no tls.crt and tls.key in {tmp_path}/certs, and development certificates "
        "cannot be written there: Read-only file system; point --cert-dir (DRA_WEBHOOK_CERT_DIR) "
        "at the mounted TLS Secret, or at a writable folder\n"
    )


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["serve", *ANY_PORTS, "--cert-dir", "{blocker}/certs"], "--cert-dir"),
        (
            [
                *("serve", *ANY_PORTS, "--cert-dir", "{certs}"),
                *("--workers", "2", "--metrics-dir", "{blocker}/m"),
            ],
            "--metrics-dir",
        ),
        (["certs", "--out", "{blocker}/certs"], "--out"),
    ],
)
def test_a_folder_that_cannot_be_written_is_one_line_and_exit_2_not_a_traceback(
    tmp_path: Path, args: list[str], flag: str
) -> None:
    blocker = tmp_path / "a-file"  # a folder below a regular file cannot be created, even by root
    blocker.write_text("")
    certs = tmp_path / "certs"
    assert main(["certs", "--out", str(certs)]) == 0
    result = subprocess.run(
        [sys.executable, "-m", "app", *(a.format(blocker=blocker, certs=certs) for a in args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("dra-webhook: ")
    assert str(blocker) in line
    assert flag in line
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_sigterm_lets_a_request_in_flight_finish_before_the_server_exits(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    body = orjson.dumps(load_fixture("pod-create-legacy-gpu"))
    port = int(server.base_url.rsplit(":", 1)[1])
    ctx = ssl.create_default_context(cafile=server.ca)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        head = (
            f"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        tls.sendall(head + body[:100])
        time.sleep(0.2)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert server.process.poll() is None, "exited with a request in flight"
        tls.sendall(body[100:])
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")
    assert b'"allowed":false' in answer
    server.process.wait(15)
    log = server.log.read_text()
    assert "Shutting down" in log
    assert "Finished server process" in log


def test_the_console_script_is_installed() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "app", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("dra-webhook ")
