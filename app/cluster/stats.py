"""What a cluster source reports about itself: plain counters, read by /metrics at scrape time.

Kept free of prometheus so that `app.cluster` does not depend on the metrics library; the
metrics module turns a snapshot of these numbers into Prometheus families when scraped.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from app.cluster.view import Kind


@dataclass
class KindStats:
    """The list+watch of one kind."""

    listed: bool = False
    """A list has completed at least once."""
    in_sync: bool = False
    """The last list or watch request succeeded and no error has happened since."""
    lists: int = 0
    """Completed lists, the first included."""
    relists: int = 0
    """Lists forced by 410 Gone (the watch could not resume from our resourceVersion)."""
    errors: int = 0
    """Failed requests, broken streams and objects that could not be read."""
    idle_reconnects: int = 0
    """Watches reopened after `watch_idle_seconds` without a single line (not errors)."""
    events: Counter[str] = field(default_factory=Counter)
    """Watch events by type: ADDED, MODIFIED, DELETED, BOOKMARK, ERROR."""
    last_error: str = ""
    forbidden: bool = False
    """The last list or watch was refused with 403 (an optional kind: the view holds none)."""


@dataclass
class SourceStats:
    """Everything a live source counts, by kind."""

    kinds: dict[Kind, KindStats] = field(default_factory=lambda: {k: KindStats() for k in Kind})
    templates_created: int = 0
    templates_existing: int = 0
    """Template creates answered AlreadyExists (another replica or an earlier request won)."""
    template_errors: int = 0
    templates_deleted: int = 0
    """Unused translation templates removed by garbage collection (app.cluster.template_gc)."""
    templates_kept: int = 0
    """Deletes refused by their precondition: the template changed (was touched) meanwhile."""
    template_delete_errors: int = 0
    templates_touched: int = 0
    """Templates an admission relied on while no claim of theirs existed (LAST_USED_LABEL)."""
