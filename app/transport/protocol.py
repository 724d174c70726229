"""uvicorn's httptools protocol with the connection limits it does not enforce itself.

What uvicorn 0.54 with httptools enforces, read from its source (`protocols/http/httptools_impl`):

- `timeout_keep_alive` closes a connection idle *after* a response; a connection that never sends
  a request, or stops halfway through one, is kept forever.
- `limit_concurrency` answers 503 to a new request once open connections *or* running requests
  reach the limit. It still accepts every connection and holds it, so it bounds neither memory
  nor sockets, and it counts idle keep-alive connections as load. Not used: the cap below refuses
  the connection itself, and the handler sheds reviews by queueing time.
- `h11_max_incomplete_event_size` applies to h11 only: httptools (llhttp) has no header size
  limit, and its Python wrapper joins a header value's pieces as they come (a 32 MB header was
  read whole, and answered 200).
- A request body is buffered up to 64 KiB, then reading pauses until the app reads it; the app
  waits for the rest with no deadline.

So this subclass adds, per worker (settings in `app.config.Settings`):

- a cap on open connections: one over it is answered 429 and closed as soon as TLS is up;
- `max_header_bytes`: a head (request line and headers) over it is answered 431 and closed, before
  the parser has buffered more than one read past the limit;
- `header_timeout_seconds` from the first byte of a request to the end of its head, and
  `body_timeout_seconds` from there to the end of its body: then 408 and closed (the handler
  waiting for the body sees a disconnect and lets go of what it buffered);
- the idle timeout armed from the start, so a connection that sends nothing is closed too;
- the time the head arrived, in the scope's `state`, for the handler's queueing check.

The TLS handshake itself is bounded by the event loop (60 s, asyncio's default).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from app.transport.limits import RECEIVED_AT, STATS, TransportStats


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 1024
    max_header_bytes: int = 16 * 1024
    header_timeout: float = 5.0
    body_timeout: float = 10.0


_REASONS = {
    408: "Request Timeout",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
}


def _response(status: int, message: str) -> bytes:
    body = message.encode()
    retry = b"retry-after: 1\r\n" if status == 429 else b""
    return (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n".encode()
        + b"content-type: text/plain; charset=utf-8\r\n"
        + retry
        + b"connection: close\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """One connection, served by uvicorn's httptools protocol within the limits above."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits: ConnectionLimits = getattr(config, "connection_limits", ConnectionLimits())
        self._refused = False
        self._reading_head = True
        self._head_bytes = 0
        """Bytes read while a head was incomplete: bounds what the parser buffers."""
        self._parsed_head = 0
        """Request line and header bytes the parser reported: a head read in one piece."""
        self._deadline: asyncio.TimerHandle | None = None

    @property
    def _stats(self) -> TransportStats | None:
        stats = self.app_state.get(STATS)
        return stats if isinstance(stats, TransportStats) else None

    # -- connection ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        stats = self._stats
        if len(self.connections) >= self.limits.max_connections:
            self._refused = True
            self.transport = transport
            self._count("connections")
            transport.write(_response(429, "too many connections, retry\n"))
            transport.close()
            return
        super().connection_made(transport)
        if stats is not None:
            stats.connections += 1
        # uvicorn arms its keep-alive timer only after a response: arm it now, so that a
        # connection that never sends a request is closed as one left idle.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        if self._refused:
            return
        stats = self._stats
        if stats is not None:
            stats.connections -= 1
            stats.closed += 1
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused or self.transport.is_closing():
            return
        if self._reading_head:
            self._head_bytes += len(data)
            if self._deadline is None:
                self._arm(self.limits.header_timeout, "header_timeout", "headers")
        super().data_received(data)
        if (
            self._reading_head
            and self._head_bytes > self.limits.max_header_bytes
            and not self.transport.is_closing()
        ):
            self._refuse(
                431,
                "header_bytes",
                f"request line and headers over {self.limits.max_header_bytes} bytes\n",
            )

    # -- parser callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a pipelined request: its head starts in the same read
            self._arm(self.limits.header_timeout, "header_timeout", "headers")

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._parsed_head += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._parsed_head += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._cancel_deadline()
        if self._parsed_head > self.limits.max_header_bytes:  # the whole head came in one read
            self._refuse(
                431,
                "header_bytes",
                f"request line and headers over {self.limits.max_header_bytes} bytes\n",
            )
            return
        self.scope["state"][RECEIVED_AT] = time.monotonic()
        self._arm(self.limits.body_timeout, "body_timeout", "body")
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self.transport.is_closing():
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._cancel_deadline()
        if self.transport.is_closing():
            return
        super().on_message_complete()
        self._reading_head = True
        self._head_bytes = self._parsed_head = 0

    # -- limits ----------------------------------------------------------------------------

    def _arm(self, seconds: float, reason: str, part: str) -> None:
        self._cancel_deadline()
        self._deadline = self.loop.call_later(seconds, self._expired, seconds, reason, part)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, seconds: float, reason: str, part: str) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        self._refuse(408, reason, f"request {part} not received within {seconds:g}s\n")

    def _refuse(self, status: int, reason: str, message: str) -> None:
        """Answer `status` unless a response has begun, and close the connection."""
        self._count(reason)
        cycle = self.cycle
        responding = cycle is not None and cycle.response_started and not cycle.response_complete
        if not responding:
            self.transport.write(_response(status, message))
        if cycle is not None:
            cycle.keep_alive = False
        self.transport.close()

    def _count(self, reason: str) -> None:
        stats = self._stats
        if stats is not None:
            stats.refused[reason] = stats.refused.get(reason, 0) + 1
