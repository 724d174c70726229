"""The health listener: `/healthz` and `/readyz` over plain HTTP, on a thread of their own.

The webhook port shares one event loop with every review. At 1,000 connections a probe there
queued behind the reviews for over 2 s, so the kubelet's liveness probe would restart a replica
for being busy. Here the probes have their own port (`health_port`), thread and event loop; the
admission loop only has to let go of the GIL now and then (every 1 ms once this listener runs,
`SWITCH_INTERVAL_SECONDS`), so an answer takes milliseconds whatever the load on the webhook port.

- `/healthz` (liveness) fails only when the admission loop has not run a heartbeat for
  `health_stall_seconds`: a wedged loop, not a busy one (a busy loop still runs its callbacks
  within the time of its queue, well under a second at the connection cap).
- `/readyz` (readiness) is the webhook port's: every kind listed and none stale. Reading the
  view's two attributes from this thread is safe: each is one reference read.

Plain HTTP: kubelet probes do not verify certificates, and nothing here is secret. Requests are
read up to 2 KiB within 2 s, at most 64 connections at a time (more are closed at once), one
answer per connection. With several workers each binds the port with SO_REUSEPORT and the kernel
spreads the probes; each worker answers for itself.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable

import orjson

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 1.0
MAX_REQUEST_BYTES = 2048
READ_TIMEOUT_SECONDS = 2.0
MAX_CONNECTIONS = 64
SWITCH_INTERVAL_SECONDS = 0.001
"""How long a thread waiting for the GIL waits before it asks the running one to let go (5 ms by
default). A probe waits for the GIL at each of its few steps (accept, read, write), behind an
admission loop that never sleeps under load; 1 ms keeps a probe in single-digit milliseconds.
It costs nothing while the health thread sleeps in its poller: nobody then waits for the GIL."""

Readiness = Callable[[], tuple[bool, bytes]]
"""() -> (ready, JSON body), called on the health thread: it must only read."""


class Heartbeat:
    """The admission loop's proof of life: a timestamp it refreshes every second."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self._handle: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.last = time.monotonic()
        self._handle = loop.call_later(HEARTBEAT_SECONDS, self._beat, loop)

    def _beat(self, loop: asyncio.AbstractEventLoop) -> None:
        self.last = time.monotonic()
        self._handle = loop.call_later(HEARTBEAT_SECONDS, self._beat, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def age(self) -> float:
        return time.monotonic() - self.last


class HealthServer:
    """Serves the probes on `host:port` from a daemon thread until `stop()`."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ready: Readiness,
        heartbeat: Heartbeat,
        stall_after: float,
    ) -> None:
        self.host = host
        self.port = port
        self._ready = ready
        self._heartbeat = heartbeat
        self._stall_after = stall_after
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._open = 0

    def start(self) -> None:
        """Bind and serve; returns once listening (raises OSError when the port is taken)."""
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):  # every worker binds the same port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((self.host, self.port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_SECONDS))
        loop = asyncio.new_event_loop()
        self._loop = loop
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            self._server = loop.run_until_complete(
                loop.create_server(lambda: _Probe(self), sock=sock)
            )
            started.set()
            loop.run_forever()
            self._server.close()
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=run, name="dra-webhook-health", daemon=True)
        self._thread.start()
        started.wait(5)
        logger.info("health listener on %s:%d", self.host, self.port)

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        self._loop = self._thread = None

    def answer(self, path: str) -> tuple[int, bytes]:
        if path == "/healthz":
            age = self._heartbeat.age()
            if age <= self._stall_after:
                return 200, b'{"status":"ok"}'
            return 503, orjson.dumps({"status": "stalled", "loopSilentSeconds": round(age, 1)})
        if path == "/readyz":
            ready, body = self._ready()
            return (200 if ready else 503), body
        return 404, b'{"message":"not found"}'


class _Probe(asyncio.Protocol):
    """One probe connection: read the request line, answer, close."""

    def __init__(self, server: HealthServer) -> None:
        self._server = server
        self._buffer = b""
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if self._server._open >= MAX_CONNECTIONS:
            transport.abort()
            return
        self._server._open += 1
        self._timer = asyncio.get_running_loop().call_later(READ_TIMEOUT_SECONDS, transport.abort)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._server._open -= 1

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._buffer += data
        if b"\r\n\r\n" not in self._buffer:
            if len(self._buffer) > MAX_REQUEST_BYTES:
                transport.abort()
            return
        line = self._buffer.split(b"\r\n", 1)[0].split(b" ")
        if len(line) != 3 or line[0] not in (b"GET", b"HEAD"):
            status, body = 400, b'{"message":"GET /healthz or /readyz"}'
        else:
            path = line[1].split(b"?", 1)[0].decode("latin-1")
            status, body = self._server.answer(path)
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}
        head = (
            f"HTTP/1.1 {status} {reason[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        ).encode()
        transport.write(head if line[0] == b"HEAD" else head + body)
        transport.close()
