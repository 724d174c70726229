"""The folder where, with several workers, each keeps its metric files (prometheus-client's
multiprocess mode): named in the environment before the workers start, emptied of an earlier
run's files."""

from __future__ import annotations

import tempfile
from pathlib import Path

from app.errors import ConfigError

__all__ = ["MULTIPROC_ENV", "prepare_multiprocess_dir"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The variable prometheus-client reads at import to switch to per-process files."""


def prepare_multiprocess_dir(path: Path | None) -> Path:
    """The folder for per-worker metric files, created if needed and emptied of old ones.

    None makes a fresh temporary folder. Only `*.db` files (what prometheus-client writes) are
    removed, so a folder given by mistake loses nothing else.
    """
    try:
        if path is None:
            return Path(tempfile.mkdtemp(prefix="dra-webhook-metrics-"))
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
    except OSError as exc:
        where = path if path is not None else Path(tempfile.gettempdir())
        raise ConfigError(
            f"cannot write worker metric files in {where.absolute()}: {exc.strerror}; with "
            "--workers > 1, point --metrics-dir (DRA_WEBHOOK_METRICS_DIR) or TMPDIR at a "
            "writable folder (the chart mounts an emptyDir at /tmp)"
        ) from None
    return path
