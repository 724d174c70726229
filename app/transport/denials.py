"""How denials reach the log: one line per namespace and deciding checks per window, the ones
held back counted into the next line of that kind.

Every denial is counted in `dra_webhook_denials_total` and answered with its full message; the
log line is for an operator reading why. A denial storm (a controller retrying pods a dra-only
namespace refuses, hundreds a second) would otherwise write one line per pod — a flood that costs
the log pipeline, and this process about as much CPU as deciding the review. So, like the
kubelet's event aggregation: the first denial of a (namespace, checks) key in a window is logged
at once; the next ones of that key within `window` seconds are held back and counted, and the
next line of that key says how many (`"repeated": 37`, since its previous line). A key seen
once a minute is logged every time. `window` 0 logs every denial, with its uid: the default
(DRA_WEBHOOK_DENIAL_LOG_SECONDS), so that every review answered can be traced in the logs; the
window is for clusters that would rather count a storm than trace each of its reviews. At most
`keys` keys are tracked; past that the oldest window is forgotten (its held-back count is said
by no later line: bounded memory first).
"""

from __future__ import annotations

from dataclasses import dataclass

Key = tuple[str, tuple[str, ...]]


@dataclass(slots=True)
class _Window:
    started: float
    held: int = 0


class DenialLog:
    """Whether a denial is logged now, and how many of its kind were held back before it."""

    def __init__(self, window: float, keys: int = 4096) -> None:
        self.window = window
        self.keys = keys
        self._windows: dict[Key, _Window] = {}

    def admit(self, key: Key, now: float) -> int | None:
        """None: hold this denial back (counted); else log it, saying the returned number of
        denials of its key held back since the previous line."""
        if self.window <= 0:
            return 0
        found = self._windows.get(key)
        if found is not None and now - found.started < self.window:
            found.held += 1
            return None
        held = found.held if found is not None else 0
        if found is None and len(self._windows) >= self.keys:
            del self._windows[next(iter(self._windows))]
        self._windows.pop(key, None)
        self._windows[key] = _Window(now)
        return held
