"""What the server tests share: raw HTTP/1.1 over TLS to a running webhook, and small limits
to run it with."""

from __future__ import annotations

import socket
import ssl

import orjson

from tests.helpers import TlsServer, load_fixture

LIMITS = {
    "DRA_WEBHOOK_MAX_CONNECTIONS": "6",
    "DRA_WEBHOOK_MAX_HEADER_BYTES": "8192",
    "DRA_WEBHOOK_HEADER_TIMEOUT_SECONDS": "1",
    "DRA_WEBHOOK_BODY_TIMEOUT_SECONDS": "1",
    "DRA_WEBHOOK_IDLE_TIMEOUT_SECONDS": "1",
    "DRA_WEBHOOK_MAX_BODY_BYTES": "1048576",
    "DRA_WEBHOOK_MAX_BUFFERED_BYTES": "1572864",
}
REVIEW = orjson.dumps(load_fixture("pod-create-legacy-gpu"))


def connect(server: TlsServer, timeout: float = 5.0) -> ssl.SSLSocket:
    host, port = server.base_url.removeprefix("https://").split(":")
    raw = socket.create_connection((host, int(port)), timeout=timeout)
    return server.ssl_context().wrap_socket(raw, server_hostname=host)


def head(path: str = "/validate", length: int = len(REVIEW), extra: str = "") -> bytes:
    return (
        f"POST {path}?timeout=10s HTTP/1.1\r\nHost: webhook\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n"
    ).encode()


def read_response(sock: ssl.SSLSocket) -> tuple[int, bytes]:
    """Status and whole response (until the server closes or the body is complete)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    if not data:
        return 0, b""
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(head.split(b" ", 2)[1]), head + b"\r\n\r\n" + body


def closed_within(sock: ssl.SSLSocket, seconds: float) -> bool:
    """Whether the server closes the connection within `seconds` (whatever it sent first)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except (ConnectionError, ssl.SSLError):
        return True
    return True
