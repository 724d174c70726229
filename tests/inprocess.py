"""The server in process, without sockets or TLS: a stand-in transport for uvicorn's protocol
and the bytes kube-apiserver sends (tests/benchmarks/test_bench_transport.py, tests/instructions.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.lifespan.on import LifespanOn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState


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


class Connection:
    """One connection to `app` on `loop`, served by `protocol` (uvicorn's lifespan run first)."""

    def __init__(
        self, app: Any, protocol: type[HttpToolsProtocol], loop: asyncio.AbstractEventLoop
    ) -> None:
        config = uvicorn.Config(app, proxy_headers=False, log_config=None)
        config.load()
        self.loop = loop
        self.lifespan = LifespanOn(config)
        loop.run_until_complete(self.lifespan.startup())
        self.protocol = protocol(config, ServerState(), self.lifespan.state, loop)
        self.transport = Transport()
        self.protocol.connection_made(self.transport)  # type: ignore[arg-type]

    async def send(self, raw: bytes, times: int = 1) -> bytes:
        """Send the request `times`, one after the other; the last response's bytes."""
        answer = b""
        for _ in range(times):
            self.transport.written = b""
            self.transport.answered = self.loop.create_future()
            self.protocol.data_received(raw)
            answer = await self.transport.answered
            await asyncio.sleep(0)  # the cycle completes (keep-alive, idle phase)
        return answer

    def close(self) -> None:
        self.protocol.connection_lost(None)
        self.loop.run_until_complete(self.lifespan.shutdown())
