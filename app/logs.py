"""Structured JSON logs: one object per line, request fields as keys.

The configuration is a `logging.config.dictConfig` dictionary rather than handlers set up by
hand, because that is what uvicorn re-applies in every worker process it spawns
(`uvicorn._subprocess.subprocess_started` calls `Config.configure_logging()` in the child before
it imports the app). Handlers added in the parent alone are lost in spawned workers, and with
`--workers 2` no application line would ever be written.
"""

from __future__ import annotations

import logging.config
from typing import Any


def logging_config(level: str = "INFO") -> dict[str, Any]:
    """Every logger (ours and uvicorn's) to stderr as JSON lines, for dictConfig."""
    return {
        "version": 1,
        # Module loggers made at import (logging.getLogger(__name__)) must keep working.
        "disable_existing_loggers": False,
        "formatters": {
            "json": {
                "()": "pythonjsonlogger.json.JsonFormatter",
                "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
                "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
            }
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            # One access line per review would double the log volume of the decision lines.
            "uvicorn.access": {"handlers": [], "propagate": True, "level": "WARNING"},
        },
    }


def configure_logging(level: str = "INFO") -> None:
    """Apply `logging_config(level)` to this process."""
    logging.config.dictConfig(logging_config(level))
