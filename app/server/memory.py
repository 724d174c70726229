"""Giving memory back to the system after a burst of connections or big bodies.

After 1,000 TLS connections closed, the server's RSS stayed at twice its start: glibc keeps freed
heap pages (and raises its mmap threshold after the first large free, so later big bodies come
from the heap too). The memory is free, but only `malloc_trim(0)` hands the free pages in the
middle of the heap back (madvise), so that RSS follows load down as well as up.

The trimmer checks every `CHECK_SECONDS` whether a burst has ended since its last trim (at least
`CLOSED_CONNECTIONS` connections closed, or `RELEASED_BYTES` of bodies released) and only then
trims, in a thread: the call releases the GIL and can take milliseconds on a large heap. Where
libc has no malloc_trim (musl, macOS) it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable

CHECK_SECONDS = 5.0
CLOSED_CONNECTIONS = 64
RELEASED_BYTES = 32 * 1024 * 1024


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    found: Callable[[int], int] = trim
    return found


class Trimmer:
    """Trims once a burst has gone: `totals()` gives connections closed and body bytes released
    so far (monotonic counters kept by the transport)."""

    def __init__(self, totals: Callable[[], tuple[int, int]]) -> None:
        self._totals = totals
        self._seen = totals()
        self.trims = 0
        self._trim = _malloc_trim()

    def burst_ended(self) -> bool:
        closed, released = self._totals()
        return (
            closed - self._seen[0] >= CLOSED_CONNECTIONS
            or released - self._seen[1] >= RELEASED_BYTES
        )

    async def run(self) -> None:
        if self._trim is None:
            return
        while True:
            await asyncio.sleep(CHECK_SECONDS)
            if self.burst_ended():
                self._seen = self._totals()
                await asyncio.to_thread(self._trim, 0)
                self.trims += 1
