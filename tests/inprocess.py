"""The server in process, without sockets or TLS: a stand-in transport for uvicorn's protocol
and the bytes kube-apiserver sends (tests/benchmarks/test_bench_transport.py, tests/instructions.py).
"""

from __future__ import annotations

import asyncio
from typing import Any


class Transport:
    """Collects what the protocol writes; resolves `answered` once a whole response is in."""

    def __init__(self) -> None:
        self.written = b""
        self.answered: asyncio.Future[bytes] | None = None

    def write(self, data: bytes) -> None:
        self.written += data
        head, found, body = self.written.partition(b"\r\n\r\n")
        if not found or self.answered is None or self.answered.done():
            return
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length" and len(body) >= int(value):
                self.answered.set_result(self.written)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8443), "peername": ("127.0.0.1", 40000)}.get(
            name, default
        )

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def raw_request(body: bytes) -> bytes:
    """As kube-apiserver sends a review (its headers, `?timeout=`), in one read."""
    return (
        b"POST /validate?timeout=10s HTTP/1.1\r\nHost: dra-webhook.dra-webhook.svc:443\r\n"
        b"User-Agent: kube-apiserver-admission\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, */*\r\nAccept-Encoding: gzip\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
