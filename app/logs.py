"""Structured JSON logs: one object per line, request fields as keys.

The configuration is a `logging.config.dictConfig` dictionary rather than handlers set up by
hand, because that is what uvicorn re-applies in every worker process it spawns
(`uvicorn._subprocess.subprocess_started` calls `Config.configure_logging()` in the child before
it imports the app). Handlers added in the parent alone are lost in spawned workers, and with
`--workers 2` no application line would ever be written.
"""

from __future__ import annotations

import json
import logging.config
import time
from typing import Any

# The attributes every LogRecord has; anything else on a record came from `extra=` and is logged.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message"}


class JsonLines(logging.Formatter):
    """A record as one JSON object: time, level, logger, message, then the `extra=` fields.

    Written for the decision line every denied review logs: python-json-logger's generic field
    merge cost several microseconds a line, which the admission path pays on every denial. The
    line's text is as it was (`{"time": "...", "level": "INFO", ..., "uid": "..."}`); values JSON
    cannot encode are written as str().
    """

    def __init__(self) -> None:
        super().__init__()
        # Nothing here reads the caller's file and line, thread, process or multiprocessing
        # names: stop every LogRecord from collecting them (the logging HOWTO, "Optimization").
        logging._srcfile = None
        logging.logThreads = False
        logging.logProcesses = False
        logging.logMultiprocessing = False
        self._second = -1
        self._stamp = ""
        # The stdlib's C encoder with its default separators: lines read `"uid": "..."` as they
        # always have, for whatever greps them (orjson would be faster but writes `"uid":"..."`).
        self._encoder = json.JSONEncoder(default=str)

    def _time(self, created: float) -> str:
        second = int(created)
        if second != self._second:  # strftime once a second, not once a line
            self._second = second
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        return f"{self._stamp},{int((created - second) * 1000):03d}"

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self._time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_FIELDS:
                line[key] = value
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return self._encoder.encode(line)


def logging_config(level: str = "INFO") -> dict[str, Any]:
    """Every logger (ours and uvicorn's) to stderr as JSON lines, for dictConfig."""
    return {
        "version": 1,
        # Module loggers made at import (logging.getLogger(__name__)) must keep working.
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "app.logs.JsonLines"}},
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
