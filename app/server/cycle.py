"""A response written as one piece: uvicorn's request-response cycle with the status line and
headers held until the body comes (over TLS every write is a record and a send of its own), and
an answer the app made without a task (app.server.limits ANSWER_NOW) sent in turn."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle


class SendMade:
    """An ASGI app that sends a response already made: an answer `answer_now` gave that could
    not be written at once (writing paused), sent as any app's is, after the drain."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


class _Held:
    """Stands in for the transport while uvicorn writes a response's status line and headers."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)


class _Prefixed:
    """Stands in for the transport while uvicorn writes the body: its first write (or a close)
    sends the held head with it."""

    def __init__(self, transport: asyncio.Transport, head: bytes) -> None:
        self.transport = transport
        self.head: bytes | None = head

    def write(self, data: bytes) -> None:
        head = self.head
        if head is not None:
            self.head = None
            data = head + data
        self.transport.write(data)

    def flush(self) -> None:
        if self.head is not None and not self.transport.is_closing():
            self.write(b"")

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()


class Cycle(RequestResponseCycle):
    """uvicorn's request-response cycle, writing the status line and headers together with the
    first part of the body: over TLS every write is a record and a send of its own, and every
    answer of this server is one body sent right after its head. (A head is held only between
    those two `send` calls of the app; a body-less HEAD answer writes it when it completes.)"""

    _head: bytes | None = None

    def answer(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        """The whole response in one write, as `send` writes a start and one final body with
        `content-length` (the scope extension ANSWER): for an app whose header names are
        lowercase tokens and values plain text, which it vouches for (uvicorn's `send` checks
        them with a regular expression each). False, having written nothing, when the response
        has begun, the peer is gone, writing is paused (`send` waits for the drain), the request
        is a HEAD, or the access log is on: then the app sends as usual."""
        if (
            self.response_started
            or self.disconnected
            or self.flow.write_paused
            or self.access_log
            or self.scope["method"] == "HEAD"
        ):
            return False
        self.response_started = True
        self.waiting_for_100_continue = False
        content = [STATUS_LINE[status]]
        for name, value in self.default_headers:
            content += (name, b": ", value, b"\r\n")
        for name, value in headers:
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive:
            content.append(b"connection: close\r\n")
        content += (b"\r\n", body)
        self.transport.write(b"".join(content))
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()
        return True

    async def send(self, message: ASGISendEvent) -> None:
        transport = self.transport
        if message["type"] == "http.response.start" and not self.response_started:
            held = _Held()
            self.transport = held  # type: ignore[assignment]
            try:
                await super().send(message)
            finally:
                self.transport = transport
            if held.parts:
                self._head = b"".join(held.parts)
            return
        head = self._head
        if head is None:
            await super().send(message)
            return
        self._head = None
        prefixed = _Prefixed(transport, head)
        self.transport = prefixed  # type: ignore[assignment]
        try:
            await super().send(message)
        finally:
            self.transport = transport
            prefixed.flush()
