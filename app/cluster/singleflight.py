"""One call per key in flight: concurrent callers for the same key await the one call.

The API calls the webhook makes while answering (a namespace the view lacks, a template to create
or touch) are asked for by every review of a burst at once: a hundred pods of a new shape need
the same template. As Go's `golang.org/x/sync/singleflight` (`Group.Do`) and the per-key lock of
`k8s.io/utils/keymutex`, the first caller for a key starts the call and every caller that comes
while it runs awaits that call's result, or its exception.

Differences from singleflight that asyncio asks for:

- The call runs as a task of its own and is awaited through `asyncio.shield`: a caller that goes
  away (its client timed out, its task was cancelled) does not cancel the call the others await.
- Nothing is remembered once the call has finished, success or failure: the next caller starts
  a new one (a failure may not last; a result may go stale).

Used on one event loop only, so the map needs no lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from functools import partial
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class SingleFlight(Generic[K, T]):
    """The calls in flight, by key."""

    def __init__(self) -> None:
        self._calls: dict[K, asyncio.Future[T]] = {}

    def __contains__(self, key: object) -> bool:
        """A call for `key` is in flight."""
        return key in self._calls

    def __len__(self) -> int:
        return len(self._calls)

    async def do(self, key: K, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`'s result, shared with every concurrent caller for `key`.

        `call` is only called when no call for `key` is in flight; its exception is raised to
        every caller that awaited it.
        """
        flight = self._calls.get(key)
        if flight is None:
            flight = asyncio.ensure_future(call())
            self._calls[key] = flight
            flight.add_done_callback(partial(self._landed, key))
        return await asyncio.shield(flight)

    def _landed(self, key: K, flight: asyncio.Future[T]) -> None:
        if self._calls.get(key) is flight:
            del self._calls[key]
