"""A one-line progress bar on stderr, drawn only when stderr is a terminal.

Under a CronJob, in CI or piped into a file it prints nothing: a log should not fill with
carriage returns. The total of a kind comes from the list's `remainingItemCount`, which the API
server sends with every page but the last (it may be absent: then only the count is shown).
"""

from __future__ import annotations

from typing import TextIO

WIDTH = 30


class Progress:
    def __init__(self, stream: TextIO, enabled: bool | None = None) -> None:
        self._stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self._shown = False

    def update(self, what: str, seen: int, remaining: int | None) -> None:
        if not self.enabled:
            return
        if remaining is None:
            line = f"{what:<24} {seen}"
        else:
            total = max(seen + remaining, 1)
            done = WIDTH * seen // total
            line = f"{what:<24} [{'#' * done}{'.' * (WIDTH - done)}] {seen}/{total}"
        self._stream.write(f"\r\x1b[2K{line}")
        self._stream.flush()
        self._shown = True

    def done(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()
            self._shown = False
