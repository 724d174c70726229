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
- the idle timeout armed from the start, so a connection that sends nothing is closed too, and
  then within the header timeout (the long idle timeout is for keep-alive between requests);
- the time the head arrived, in the scope's `state`, for the handler's queueing check.

The TLS handshake itself is bounded by the event loop (60 s, asyncio's default).

The deadlines cost no timer per request. Each connection keeps the one deadline of the phase it
is in (idle, head, body, or none while the app answers) as a number, and one sweep per worker
(`_Sweep`, a few times a second) closes the connections past theirs; uvicorn's own keep-alive
timer is replaced by the idle phase. Three `call_later`/`cancel` pairs per request (head, body,
keep-alive) and six overridden parser callbacks cost ~6 µs a review (docs/benchmarks.md, "CPU
per review: the transport's share"). A deadline is therefore met late by up to the sweep
interval (at most 0.5 s, a quarter of the shortest timeout when that is shorter).

A response's status line and headers are written together with its body (app.server.cycle):
over TLS each write is a record of its own and a send, and every answer here is one body.

A small POST to an app that answers at once (`ANSWER_NOW`, app.server.limits: the admission
reviews) starts no task: when its body is in, the app is asked for the whole response in the
loop's next turn, and it is written then; only where the app must await something (or declines)
does the task start, reading the body as usual. A task, its coroutine and the ASGI receive and
send cost ~5% of a review's instructions (docs/benchmarks.md, "The review without a task").
The server still knows nothing of admission: any app may offer the attribute.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, cast

import httptools
from uvicorn._types import ASGI3Application, HTTPScope
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import (
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.server import ServerState

from app.server.cycle import Cycle, SendMade
from app.server.limits import ANSWER, ANSWER_NOW, RECEIVED_AT, STATS, AnswerNow, TransportStats


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

# The phase a connection is in: what its deadline bounds.
_NONE = 0
"""No deadline: a request is being answered (or the connection is refused)."""
_IDLE = 1
_HEAD = 2
_BODY = 3

_SWEEP = "_dra_webhook_sweep"
"""Attribute of uvicorn's per-worker ServerState holding that worker's `_Sweep`."""
SWEEP_MAX_INTERVAL = 0.5


def _small_post(scope: HTTPScope, headers: list[tuple[bytes, bytes]]) -> bool:
    """A POST whose declared body fits what is buffered without pausing (HIGH_WATER_LIMIT)."""
    if scope["method"] != "POST":
        return False
    for name, value in headers:
        if name == b"content-length":
            return value.isdigit() and int(value) <= HIGH_WATER_LIMIT
    return False


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
        self._head_counted = True
        """False when the current head began inside the read of the request before it
        (pipelined): `_head_bytes` does not cover it, so its size is summed when it completes."""
        self._phase = _NONE
        self._deadline = 0.0
        """`loop.time()` by which the phase must end; the sweep closes the connection after."""
        stats = app_state.get(STATS)
        self._stats = stats if isinstance(stats, TransportStats) else None
        answer_now = getattr(self.app, ANSWER_NOW, None)
        self._answer_now: AnswerNow | None = answer_now if callable(answer_now) else None
        """The app's answer to a request whose body is in, when it can give it without awaiting
        (ANSWER_NOW); None when the app has none (uvicorn's wrappers hide it too)."""
        self._deferred = False
        """The current request's task waits for its body: `on_message_complete` asks the app
        for its answer first."""

    # -- connection ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            self._refused = True
            self.transport = transport
            self._count("connections")
            transport.write(_response(429, "too many connections, retry\n"))
            transport.close()
            return
        super().connection_made(transport)
        if self._stats is not None:
            self._stats.connections += 1
        # uvicorn's keep-alive applies only after a response: idle from the start too, but a
        # connection that has sent nothing yet gets no longer than a head may take (the long
        # keep-alive is for the API server's connections between reviews, not for silence)
        self._enter(_IDLE, min(self.timeout_keep_alive, self.limits.header_timeout))
        _Sweep.of(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._phase = _NONE
        self._deferred = False
        if self._refused:
            return
        if self._stats is not None:
            self._stats.connections -= 1
            self._stats.closed += 1
        super().connection_lost(exc)

    def _unset_keepalive_if_required(self) -> None:
        """uvicorn's keep-alive timer is never armed here: the idle phase replaces it."""

    def data_received(self, data: bytes) -> None:
        # uvicorn's, with the head's size and deadline; no keep-alive timer to cancel
        if self._refused or self.transport.is_closing():
            return
        if self._reading_head:
            self._head_bytes += len(data)
            if self._phase != _HEAD:  # a head begins in this read: counted from here
                self._enter(_HEAD, self.limits.header_timeout)
                self._head_counted = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        if (
            self._reading_head
            and self._head_bytes > self.limits.max_header_bytes
            and not self.transport.is_closing()
        ):
            self._refuse_head()

    # -- parser callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase != _HEAD:  # a pipelined request: its head starts in the same read
            self._enter(_HEAD, self.limits.header_timeout)

    def on_headers_complete(self) -> None:
        self._reading_head = False
        if self._head_bytes > self.limits.max_header_bytes or not self._head_counted:
            # the head came in one read with more after it, or began in the read of the
            # request before it: its own size decides
            size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
            if size > self.limits.max_header_bytes:
                self._refuse_head()
                return
        self.scope["state"][RECEIVED_AT] = time.monotonic()
        self._enter(_BODY, self.limits.body_timeout)
        if self.parser.should_upgrade():
            super().on_headers_complete()  # uvicorn's upgrade handling, unchanged
            return
        self._start_cycle()

    def _start_cycle(self) -> None:
        """uvicorn's `on_headers_complete` after its upgrade branch, with `Cycle` (and without
        `limit_concurrency`, not used: see the module doc)."""
        parser = self.parser
        scope = self.scope
        http_version = parser.get_http_version()
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        parsed_url = httptools.parse_url(self.url)
        raw_path = parsed_url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            from urllib.parse import unquote

            path = unquote(path)
        scope["path"] = self.root_path + path
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        scope["query_string"] = parsed_url.query or b""
        existing = self.cycle
        self.cycle = Cycle(
            scope=scope,
            transport=self.transport,
            flow=self.flow,
            logger=self.logger,
            access_logger=self.access_logger,
            access_log=self.access_log,
            default_headers=self.server_state.default_headers,
            message_event=asyncio.Event(),
            expect_100_continue=self.expect_100_continue,
            keep_alive=http_version != "1.0" and parser.should_keep_alive(),
            on_response=self.on_response_complete,
        )
        scope["extensions"] = {ANSWER: {"answer": self.cycle.answer}}
        app: ASGI3Application = self.app
        if existing is None or existing.response_complete:
            if (
                self._answer_now is not None
                and not self.expect_100_continue  # (its body waits for the task's first read)
                and not self.access_log  # (`answer` declines to write while it is on)
                and _small_post(scope, self.headers)
            ):
                self._deferred = True  # (its body is in within HIGH_WATER_LIMIT: never paused)
                return
            self._start_asgi_task(self.cycle, app)
        else:  # pipelined: queued, as uvicorn does
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, app))

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete or self.transport.is_closing():
            return  # refused (431) or answered already: nothing reads it
        if self.parser.should_upgrade() and self._should_upgrade():
            return
        cycle.body += body
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.message_event.set()

    def on_message_complete(self) -> None:
        self._phase = _NONE  # the app answers in its own time; idle again after the response
        if self.transport.is_closing():
            return
        super().on_message_complete()
        self._reading_head = True
        self._head_bytes = 0
        self._head_counted = False  # until a read begins a head (data_received)
        if self._deferred:
            # answered in the loop's next turn, as a task would be, not inside this read: the
            # reads of a turn first, then their answers (a response written from within the
            # TLS read callback cost 10% more CPU per review under load, measured)
            self._deferred = False
            self.loop.call_soon(self._answer_or_start, self.cycle)

    def _answer_or_start(self, cycle: RequestResponseCycle) -> None:
        """A deferred request, its body in: the app's answer written at once, without a task,
        where it gives one (ANSWER_NOW); else its task, which reads the body as usual."""
        assert self._answer_now is not None
        if cycle.disconnected:
            return
        try:
            answer = self._answer_now(cycle.scope, bytes(cycle.body))  # (as `receive` gives it)
        except Exception:  # a bug in the app: its task serves the request, as without
            self.logger.exception("answer_now raised; the request goes to the app's task")
            answer = None
        if answer is None:
            self._start_asgi_task(cycle, self.app)
        elif not cast("Cycle", cycle).answer(*answer):  # (writing is paused: sent in turn)
            self._start_asgi_task(cycle, SendMade(*answer))

    def on_response_complete(self) -> None:
        # uvicorn's, with the idle phase in place of its keep-alive timer
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        elif self._phase == _NONE:  # not already reading the next head
            self._enter(_IDLE, self.timeout_keep_alive)

    # -- limits ----------------------------------------------------------------------------

    def _enter(self, phase: int, seconds: float) -> None:
        self._phase = phase
        self._deadline = self.loop.time() + seconds

    def _expire(self) -> None:
        """The sweep found this connection past its phase's deadline."""
        phase = self._phase
        self._phase = _NONE
        if self.transport is None or self.transport.is_closing():
            return
        if phase == _IDLE:
            self.transport.close()  # as uvicorn's keep-alive timeout does
        elif phase == _HEAD:
            seconds = self.limits.header_timeout
            self._refuse(
                408, "header_timeout", f"request headers not received within {seconds:g}s\n"
            )
        elif phase == _BODY:
            seconds = self.limits.body_timeout
            self._refuse(408, "body_timeout", f"request body not received within {seconds:g}s\n")

    def _refuse_head(self) -> None:
        self._refuse(
            431,
            "header_bytes",
            f"request line and headers over {self.limits.max_header_bytes} bytes\n",
        )

    def _refuse(self, status: int, reason: str, message: str) -> None:
        """Answer `status` unless a response has begun, and close the connection."""
        self._phase = _NONE
        self._count(reason)
        cycle = self.cycle
        responding = cycle is not None and cycle.response_started and not cycle.response_complete
        if not responding:
            self.transport.write(_response(status, message))
        if cycle is not None:
            cycle.keep_alive = False
        self.transport.close()

    def _count(self, reason: str) -> None:
        if self._stats is not None:
            self._stats.refused[reason] = self._stats.refused.get(reason, 0) + 1


class _Sweep:
    """The phase deadlines of one worker's connections, checked by one timer.

    Runs every `interval` while the worker has connections, and closes (or answers 408) those
    past their deadline; held by uvicorn's per-worker `ServerState`, whose `connections` it
    walks.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, connections: set[Any], interval: float
    ) -> None:
        self.loop = loop
        self.connections = connections
        self.interval = interval
        self._timer: asyncio.TimerHandle | None = None

    @staticmethod
    def of(protocol: LimitedHttpToolsProtocol) -> _Sweep:
        """The sweep of the protocol's worker, started if it was not running."""
        state = protocol.server_state
        sweep = getattr(state, _SWEEP, None)
        if not isinstance(sweep, _Sweep):
            limits = protocol.limits
            shortest = min(limits.header_timeout, limits.body_timeout, protocol.timeout_keep_alive)
            sweep = _Sweep(
                protocol.loop, protocol.connections, min(SWEEP_MAX_INTERVAL, shortest / 4)
            )
            setattr(state, _SWEEP, sweep)
        sweep.start()
        return sweep

    def start(self) -> None:
        if self._timer is None:
            self._timer = self.loop.call_later(self.interval, self._run)

    def _run(self) -> None:
        self._timer = None
        now = self.loop.time()
        for connection in list(self.connections):
            if (
                isinstance(connection, LimitedHttpToolsProtocol)
                and connection._phase != _NONE
                and connection._deadline <= now
            ):
                connection._expire()
        if self.connections:
            self.start()
