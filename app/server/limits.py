"""Load limits that need the app's view of a request: buffered body bytes and queueing time.

The connection-level limits (connections, header bytes, header/body/idle timeouts) live in
`app.server.protocol`, under uvicorn; the two here are checked by the app's handler
(`app.transport.app`):

- **Buffered bytes.** Every review's body is held whole while it is decoded and answered. The
  budget is shared by every request of the worker: a review whose declared length (or whose
  chunks, when it declares none) would take the total over `max_buffered_bytes` is refused with
  429 before its body is read, and gives its share back when answered.
- **Queueing.** On one event loop, reviews that arrive faster than they are answered wait for their
  turn. The API server gives up after its `timeoutSeconds` (it sends `?timeout=10s`); answering a
  review it no longer waits for only delays the ones it still waits for. A review whose headers
  arrived more than `max_queue_seconds` ago (or past its own `?timeout=`) when its turn comes is
  refused with 429 at once, without being decoded.

429, not 503: the refusal says "too much load, retry", and the API server applies the webhook's
failurePolicy either way; it is also what the overload test counts as refused fast, apart from
the 5xx that mean a fault.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

RECEIVED_AT = "dra_webhook_received_at"
"""Key in the ASGI scope's `state`: `time.monotonic()` when the request's headers were read."""
ANSWER = "dra_webhook.answer"
"""Key in the ASGI scope's `extensions` (its value a dict, as ASGI has them): under "answer",
`answer(status, headers, body) -> bool`, which writes a whole response (status line, headers,
one body) at once, without the two ASGI send messages; False when it cannot (then send them as
usual). Offered by this server's protocol only."""
ANSWER_NOW = "answer_now"
"""Attribute of the ASGI app this server's protocol looks for: `answer_now(scope, body)`, the
whole response (status, headers, body) to a POST whose body has been read, or None. For a
small POST (a declared length within what is buffered without pausing) the protocol starts no
task until the body is in, then asks: an answer is written at once (`ANSWER`'s way), without a
task or the ASGI receive and send; None starts the task, which reads the body as usual. An
app without it is served as uvicorn serves any app."""
AnswerNow = Callable[[Any, bytes], tuple[int, list[tuple[bytes, bytes]], bytes] | None]

STATS = "dra_webhook_transport_stats"
"""Key in the lifespan state (uvicorn hands it to every connection): the `TransportStats`."""

REFUSALS = (
    "connections",
    "header_bytes",
    "header_timeout",
    "body_timeout",
    "buffered_bytes",
    "queue",
)
"""Why a request or connection was refused; the label values of `dra_webhook_refused_total`."""

_TIMEOUT = re.compile(r"(?:^|&)timeout=(\d+(?:\.\d+)?)(ms|s|m)?(?:&|$)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


@dataclass
class TransportStats:
    """Plain counters the protocol and the handler update; exported at scrape time."""

    connections: int = 0
    closed: int = 0
    """Connections closed so far (the memory trimmer watches it)."""
    released: int = 0
    """Request body bytes handled and let go of so far."""
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSALS, 0))


class OverloadedError(Exception):
    """The request is refused for load (429); `reason` is one of REFUSALS."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ByteBudget:
    """Body bytes held by the requests of one worker, against a fixed total.

    Used on the event loop thread only, so plain arithmetic needs no lock.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> None:
        """Reserve `size` bytes; raises OverloadedError when they do not fit."""
        if self.used + size > self.limit:
            raise OverloadedError(
                "buffered_bytes",
                f"{self.used} bytes of request bodies are being handled; {size} more would go "
                f"over the limit of {self.limit}: retry",
            )
        self.used += size

    def give(self, size: int) -> None:
        self.used = max(0, self.used - size)


@lru_cache(maxsize=64)
def caller_timeout(query: bytes) -> float | None:
    """The `timeout` the API server puts in the webhook URL (`?timeout=10s`), in seconds.

    Remembered per query string: the API server sends the same one on every call."""
    if b"timeout=" not in query:
        return None
    found = _TIMEOUT.search(query.decode("latin-1"))
    if found is None:
        return None
    return float(found.group(1)) * _UNIT[found.group(2)]


def check_queue_time(waited: float, max_queue: float, query: bytes) -> None:
    """Raise OverloadedError when a review waited too long for its turn (see the module doc)."""
    limit = max_queue
    timeout = caller_timeout(query)
    if timeout is not None:
        limit = min(limit, timeout)
    if waited > limit:
        raise OverloadedError(
            "queue",
            f"the review waited {waited:.2f}s for its turn (limit {limit:g}s): overloaded, retry",
        )
