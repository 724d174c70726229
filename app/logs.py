"""Structured JSON logs: one object per line, request fields as keys.

The configuration is a `logging.config.dictConfig` dictionary rather than handlers set up by
hand, because that is what uvicorn re-applies in every worker process it spawns
(`uvicorn._subprocess.subprocess_started` calls `Config.configure_logging()` in the child before
it imports the app). Handlers added in the parent alone are lost in spawned workers, and with
`--workers 2` no application line would ever be written.
"""

from __future__ import annotations

import asyncio
import json
import json.encoder
import logging.config
import time
from collections.abc import Callable
from typing import Any

from app.bounded import BoundedCache, CacheName

_MILLIS = tuple(f"{n:03d}" for n in range(1000))
"""A line's milliseconds, formatted once."""
_HEAD_KEYS = frozenset(("time", "level", "logger", "message"))
"""The keys every line starts with, in this order."""
_HEADS_KEPT = 64
_encode_ascii: Callable[[str], str] = json.encoder.encode_basestring_ascii

# The attributes every LogRecord has; anything else on a record came from `extra=` and is logged.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message"}


class LineShape:
    """The keys of a line logged on a hot path, in order, and those of them whose values repeat
    from line to line (a review's endpoint, kind, namespace): a run of such keys is encoded once
    per distinct tuple of values and kept (at most `KEPT` tuples per shape), the other values
    are encoded on every line. `JsonLines.format_line` writes the text `format_fields` writes for
    the same fields (tests/test_logs.py); the decision line of every denied review is one. A
    repeating key's values keep one type (False and 0 are one key to the cache); a value that
    cannot be a dict key (a list) is encoded on every line.
    """

    KEPT = 1024
    """Distinct tuples of values kept per shape (the least recently used go first), within the
    share of the cache budget of CacheName.LOG_LINES: a namespace makes one per kind, operation
    and verdict it sees, so this bounds what requests can make the process keep."""

    __slots__ = ("_cache", "_kept", "_runs", "keys", "plain")

    def __init__(self, *keys: str, repeating: frozenset[str] = frozenset()) -> None:
        if len(set(keys)) != len(keys):
            raise ValueError(f"a key twice in {keys}")
        self.keys = keys
        self.plain = _HEAD_KEYS.isdisjoint(keys)
        """No key is one of the four every line starts with (`JsonLines.format_line`)."""
        runs: list[tuple[int, int, str]] = []
        for index, key in enumerate(keys):
            if key not in repeating:
                runs.append((index, index + 1, f", {_encode_ascii(key)}: "))
            elif runs and not runs[-1][2] and runs[-1][1] == index:  # the run goes on
                runs[-1] = (runs[-1][0], index + 1, "")
            else:
                runs.append((index, index + 1, ""))
        self._runs = tuple(runs)
        """(start, end, prefix): one value written after `prefix`, or with an empty prefix the
        repeating keys start:end, encoded with their keys and kept."""
        self._cache: BoundedCache[tuple[Any, ...], str] = BoundedCache(
            CacheName.LOG_LINES, self.KEPT
        )
        """(start of the run, its values) -> the run's text."""
        self._kept = self._cache.reader()


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
        self._heads: dict[tuple[str, int], str] = {}
        self._messages: dict[tuple[str, int, str], str] = {}
        # The stdlib's C encoder with its default separators: lines read `"uid": "..."` as they
        # always have, for whatever greps them (orjson would be faster but writes `"uid":"..."`).
        self._encoder = json.JSONEncoder(default=str)
        # The C encoder `self._encoder.encode` builds on every call, built once: the same text
        # (tests/test_logs.py), ~1 µs less a line. Without its circular-reference markers: a
        # value that refers to itself overflows the stack, and is then left to the stdlib
        # encoder, which says so.
        make: Any = getattr(json.encoder, "c_make_encoder", None)
        self._c_encode: Callable[[Any, int], list[str]] | None = (
            make(
                None,
                str,
                json.encoder.encode_basestring_ascii,
                None,
                ": ",
                ", ",
                False,
                False,
                True,
            )
            if make is not None
            else None
        )

    def _encode(self, line: dict[str, Any]) -> str:
        """`self._encoder.encode(line)`."""
        if self._c_encode is not None:
            try:
                return "".join(self._c_encode(line, 0))
            except RecursionError:
                pass
        return self._encoder.encode(line)

    def _time(self, created: float) -> str:
        second = int(created)
        if second != self._second:  # strftime once a second, not once a line
            self._second = second
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second)) + ","
        return self._stamp + _MILLIS[int((created - second) * 1000)]

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
        return self._encode(line)

    def format_fields(
        self,
        name: str,
        level: int,
        message: str,
        fields: dict[str, Any],
        *,
        created: float | None = None,
    ) -> str:
        """The line `format` writes for a record of these fields, without the record; `created`
        its time (`time.time()`, now by default).

        The four keys every line starts with are written from a head kept per logger and level,
        and the fields' own encoding is spliced after them: the text `format` writes (one dict,
        one encoding; tests/test_logs.py), without the merged dict. Fields that would replace
        one of the four keys take the merged dict, as `format` does."""
        stamp = self._time(time.time() if created is None else created)
        if _HEAD_KEYS.isdisjoint(fields):
            head = self._heads.get((name, level))
            if head is None:
                head = self._head(name, level)
            text = ('{"time": "', stamp, head, _encode_ascii(message))
            if not fields:
                return "".join((*text, "}"))
            return "".join((*text, ", ", self._encode(fields)[1:]))
        line: dict[str, Any] = {
            "time": stamp,
            "level": logging.getLevelName(level),
            "logger": name,
            "message": message,
        }
        line.update(fields)
        return self._encode(line)

    def format_line(
        self,
        name: str,
        level: int,
        message: str,
        shape: LineShape,
        values: tuple[Any, ...],
        *,
        created: float | None = None,
    ) -> str:
        """The line `format_fields` writes for `dict(zip(shape.keys, values))`, the repeating
        runs of values taken from the shape's cache (`LineShape`)."""
        keys = shape.keys
        if len(values) != len(keys):
            raise ValueError(f"{len(values)} values for the {len(keys)} keys {keys}")
        if not shape.plain:
            fields = dict(zip(keys, values, strict=True))
            return self.format_fields(name, level, message, fields, created=created)
        head = self._messages.get((name, level, message))
        if head is None:
            head = self._message_head(name, level, message)
        parts = ['{"time": "', self._time(time.time() if created is None else created), head]
        append = parts.append
        for start, end, prefix in shape._runs:
            if prefix:
                value = values[start]
                append(prefix)
                append(_encode_ascii(value) if type(value) is str else self._encode(value))
                continue
            run = (start, *values[start:end])
            try:
                text = shape._kept(run)  # (a hit neither counted nor refreshed: `reader`)
            except TypeError:  # (a value that cannot be a key: encoded on every line)
                text = None
                run = ()
            if text is None:
                text = shape._cache.get(run) if run else None
            if text is None:
                fields = dict(zip(keys[start:end], values[start:end], strict=True))
                text = ", " + self._encode(fields)[1:-1]
                if run:
                    shape._cache.put(run, text)
            append(text)
        parts.append("}")
        return "".join(parts)

    def _message_head(self, name: str, level: int, message: str) -> str:
        """What follows the time in a line of this logger, level and message, the message
        included (`format_line`'s lines: a few distinct messages, each kept)."""
        head = self._head(name, level) + _encode_ascii(message)
        if len(self._messages) < _HEADS_KEPT:
            self._messages[(name, level, message)] = head
        return head

    def _head(self, name: str, level: int) -> str:
        """What follows the time in a line of this logger and level, up to the message."""
        head = (
            f'", "level": {_encode_ascii(str(logging.getLevelName(level)))}, '
            f'"logger": {_encode_ascii(name)}, "message": '
        )
        if len(self._heads) < _HEADS_KEPT:
            self._heads[(name, level)] = head
        return head


class JsonLinesHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler that writes the per-review lines of one event-loop iteration together.

    A line written and flushed alone is one write system call; under load the server logs a
    line per denied review. Lines queued by `log_fields` inside a running event loop are
    written together: the first of an iteration schedules the write (`call_soon`), and the
    lines queued meanwhile go out in that same write (measured under wrk: 32 lines a write). A
    line is late by one loop iteration at most, and any record logged the usual way writes the
    queue first, so the order holds. Everything else is written at once, as StreamHandler does.
    """

    MAX_PENDING = 256
    """Lines held before writing anyway: bounds memory and the size of one write."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._pending: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """A record is written at once (with any lines queued before it, in order): the lines
        of startup and shutdown must not wait for a loop iteration that may never come (uvicorn
        re-raises SIGTERM after its last line, and the process ends without running atexit)."""
        try:
            line = self.format(record)
            with self.lock:  # type: ignore[union-attr]
                self._pending.append(line)
                self.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def emit_line(self, line: str) -> None:
        """Queue one formatted line for the end of this loop iteration (`log_fields`, the
        per-review lines); outside a running loop it is written at once."""
        with self.lock:  # type: ignore[union-attr]
            self._pending.append(line)
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            if len(self._pending) == 1:
                loop.call_soon(self.flush)
            elif len(self._pending) >= self.MAX_PENDING:
                self.flush()

    def write_lines(self, lines: list[str]) -> None:
        """Write formatted lines now (with any queued before them, in order)."""
        if lines:
            with self.lock:  # type: ignore[union-attr]
                self._pending.extend(lines)
                self.flush()

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            if self._pending:
                text = "\n".join(self._pending) + "\n"
                self._pending.clear()
                self.stream.write(text)
            if self.stream and hasattr(self.stream, "flush"):
                self.stream.flush()


def log_fields(logger: logging.Logger, level: int, message: str, fields: dict[str, Any]) -> None:
    """`logger.log(level, message, extra=fields)`, without a LogRecord where nothing needs one.

    For a line logged on a hot path (the decision line of every denied review): a LogRecord,
    the handler chain and the formatter's pass over the record's ~25 attributes cost several
    times what the line itself does. When every handler the logger reaches is a
    JsonLinesHandler with a JsonLines formatter and no filters (the server's configuration), the
    line is built here as `JsonLines.format` would build it, and queued; anything else
    (logging captured by tests, other configurations, logger filters) goes through
    `logger.log`, unchanged.
    """
    if not logger.isEnabledFor(level):
        return
    fast = _fast_handlers(logger)
    if fast is None:
        logger.log(level, message, extra=fields)
        return
    line = ""
    for handler, formatter in fast:
        if level >= handler.level:
            line = line or formatter.format_fields(logger.name, level, message, fields)
            handler.emit_line(line)


def log_line(
    logger: logging.Logger, level: int, message: str, shape: LineShape, values: tuple[Any, ...]
) -> None:
    """`log_fields(logger, level, message, dict(zip(shape.keys, values)))`, the repeating runs
    of the line encoded once (`LineShape`)."""
    if not logger.isEnabledFor(level):
        return
    fast = _fast_handlers(logger)
    if fast is None:
        logger.log(level, message, extra=dict(zip(shape.keys, values, strict=True)))
        return
    line = ""
    for handler, formatter in fast:
        if level >= handler.level:
            line = line or formatter.format_line(logger.name, level, message, shape, values)
            handler.emit_line(line)


class LineBatch:
    """The lines one logger logs on a hot path (the decision line of every denied review),
    queued as their values and logged together (`log_line`) in the event loop's next turn.

    Formatted between two reviews' checks, a line cost ~12 µs of the server's CPU, three times
    what the same code costs in a run of lines: the review in between leaves the formatter's
    objects out of the processor's caches. Queued, a line costs its review an append; the turn
    after formats the turn's lines one after the other (~30 under load). Each keeps the time
    it was logged at; it is late by a turn of the loop (as `JsonLinesHandler` writes it
    anyway), and may follow a line another logger wrote in that turn. Outside a running loop
    a line is logged at once; `write` logs what is queued (at shutdown).
    """

    MAX_QUEUED = 256
    """Lines held before logging them anyway: bounds memory."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._queued: list[tuple[int, str, LineShape, tuple[Any, ...], float]] = []

    def log(self, level: int, message: str, shape: LineShape, values: tuple[Any, ...]) -> None:
        """`log_line(self.logger, level, message, shape, values)`, in the loop's next turn."""
        if len(values) != len(shape.keys):  # (said here, to the caller, not at the write)
            raise ValueError(f"{len(values)} values for the {len(shape.keys)} keys {shape.keys}")
        queued = self._queued
        queued.append((level, message, shape, values, time.time()))
        if len(queued) == 1:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.write()
                return
            loop.call_soon(self.write)
        elif len(queued) >= self.MAX_QUEUED:
            self.write()

    def write(self) -> None:
        """Log every queued line, in order, and write them (one write where every handler is a
        JsonLinesHandler); a line that cannot be formatted is said, with its message, and takes
        none of the others with it."""
        queued, self._queued = self._queued, []
        if not queued:
            return
        logger = self.logger
        fast = _fast_handlers(logger)
        if fast is None:  # (logging captured by tests, other configurations: records)
            for level, message, shape, values, _ in queued:
                try:
                    log_line(logger, level, message, shape, values)
                except Exception:
                    logger.exception("a %r line could not be written", message)
            return
        name = logger.name
        for handler, formatter in fast:
            lines = []
            for level, message, shape, values, created in queued:
                if level < handler.level or not logger.isEnabledFor(level):
                    continue
                try:
                    lines.append(
                        formatter.format_line(name, level, message, shape, values, created=created)
                    )
                except Exception:
                    logger.exception("a %r line could not be written", message)
            handler.write_lines(lines)


def _fast_handlers(logger: logging.Logger) -> list[tuple[JsonLinesHandler, JsonLines]] | None:
    """The handlers a record of `logger` reaches, with their formatters, when every one is a
    JsonLinesHandler with a JsonLines formatter and no filters, and no logger on the way has
    filters; else None."""
    fast: list[tuple[JsonLinesHandler, JsonLines]] = []
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            formatter = handler.formatter
            if (
                type(handler) is not JsonLinesHandler
                or handler.filters
                or not isinstance(formatter, JsonLines)
            ):
                return None
            fast.append((handler, formatter))
        current = current.parent if current.propagate else None
    return fast or None


def logging_config(level: str = "INFO") -> dict[str, Any]:
    """Every logger (ours and uvicorn's) to stderr as JSON lines, for dictConfig."""
    return {
        "version": 1,
        # Module loggers made at import (logging.getLogger(__name__)) must keep working.
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "app.logs.JsonLines"}},
        "handlers": {
            "stderr": {
                "class": "app.logs.JsonLinesHandler",
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
