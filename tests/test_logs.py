"""JSON log lines: the same from every uvicorn worker as from one.

The server tests run the real CLI (`python -m app serve`, conftest's TLS server) on loopback and
read what it wrote to stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.bounded import CacheName
from app.logs import (
    JsonLines,
    JsonLinesHandler,
    LineBatch,
    LineShape,
    configure_logging,
    log_fields,
    log_line,
    logging_config,
)
from tests.helpers import FIXTURES, start_server, stop_server

LEGACY_POD = FIXTURES / "pod-create-legacy-gpu.json"


def _json_lines(text: str) -> list[dict[str, Any]]:
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_denied_review_is_logged_with_its_uid_whichever_worker_answered(
    tmp_path: Path, workers: int
) -> None:
    review = json.loads(LEGACY_POD.read_text())
    uids = [f"00000000-0000-4000-8000-{n:012d}" for n in range(12)]
    server = start_server(tmp_path, "--workers", str(workers))  # by default: every denial
    try:
        for uid in uids:
            review["request"]["uid"] = uid
            # A connection per review, so the kernel may hand each to either worker.
            response = httpx.post(
                f"{server.base_url}/validate",
                content=json.dumps(review),
                headers={"Content-Type": "application/json"},
                verify=server.ssl_context(),
                timeout=10,
            )
            assert response.json()["response"]["allowed"] is False
    finally:
        stop_server(server)
    lines = _json_lines(server.log.read_text())

    denied = [line for line in lines if line.get("message") == "review denied"]
    assert sorted(line["uid"] for line in denied) == uids
    assert {line["level"] for line in denied} == {"INFO"}
    assert all(line["namespace"] == "gpu-e2e" and line["kind"] == "Pod" for line in denied)
    # Every worker loaded its own cluster view and said so.
    loaded = [line for line in lines if line.get("message") == "cluster view loaded"]
    assert len(loaded) == workers


def test_a_storm_of_denials_is_one_line_then_one_saying_how_many_were_held_back(
    tmp_path: Path,
) -> None:
    review = json.loads(LEGACY_POD.read_text())
    server = start_server(tmp_path, env={"DRA_WEBHOOK_DENIAL_LOG_SECONDS": "0.5"})
    try:
        with httpx.Client(verify=server.ssl_context(), timeout=10) as client:
            for n in range(13):
                if n == 12:
                    time.sleep(0.6)  # the window is over: the next denial is logged
                review["request"]["uid"] = f"storm-{n}"
                answer = client.post(f"{server.base_url}/validate", json=review).json()
                assert answer["response"]["allowed"] is False  # every one answered in full
            metrics = client.get(f"{server.base_url}/metrics").text
    finally:
        stop_server(server)
    denied = [
        line
        for line in _json_lines(server.log.read_text())
        if line.get("message") == "review denied"
    ]
    assert [line["uid"] for line in denied] == ["storm-0", "storm-12"]
    assert "repeated" not in denied[0] and denied[1]["repeated"] == 11
    assert 'dra_webhook_denials_total{reason="dra-only",webhook="validate"} 13.0' in metrics


def test_logging_config_sends_uvicorn_through_the_json_handler_without_access_lines() -> None:
    config = logging_config("debug")

    assert config["root"]["level"] == "DEBUG"
    assert config["disable_existing_loggers"] is False
    assert config["loggers"]["uvicorn.access"]["level"] == "WARNING"
    assert all(not logger["handlers"] for logger in config["loggers"].values())


def test_configure_logging_writes_one_json_object_per_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure_logging("INFO")
        logging.getLogger("app.example").info("review denied", extra={"uid": "u-1"})
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    (line,) = _json_lines(capsys.readouterr().err)
    assert line["message"] == "review denied"
    assert line["uid"] == "u-1"
    assert line["level"] == "INFO"
    assert line["logger"] == "app.example"
    assert "time" in line


def test_a_json_line_keeps_extras_exceptions_and_values_json_cannot_hold() -> None:
    formatter = JsonLines()
    try:
        raise ValueError("bad quantity")
    except ValueError:
        record = logging.getLogger("app.example").makeRecord(
            "app.example",
            logging.ERROR,
            __file__,
            1,
            "review %s",
            ("failed",),
            sys.exc_info(),
            extra={"uid": "u-2", "denied_by": ["dra-only"], "path": Path("/x"), "dry_run": False},
        )
    line = json.loads(formatter.format(record))

    assert line["message"] == "review failed"
    assert line["level"] == "ERROR"
    assert (line["uid"], line["denied_by"], line["path"], line["dry_run"]) == (
        "u-2",
        ["dra-only"],
        "/x",
        False,
    )
    assert line["exc_info"].startswith("Traceback") and "bad quantity" in line["exc_info"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", line["time"])
    # The text keeps the separators log searches rely on (`"uid": "u-2"`, as always written).
    assert '"uid": "u-2"' in formatter.format(record)
    # Nothing of the LogRecord's own bookkeeping leaks into the line.
    assert not {"args", "msg", "pathname", "lineno", "created", "exc_text"} & set(line)


class _Writes:
    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> None:
        self.writes.append(text)

    def flush(self) -> None:
        pass


def _batched(name: str) -> tuple[logging.Logger, _Writes, JsonLinesHandler]:
    stream = _Writes()
    handler = JsonLinesHandler(stream)
    handler.setFormatter(JsonLines())
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, stream, handler


def test_lines_of_one_event_loop_iteration_are_written_together_and_none_is_lost() -> None:
    logger, stream, handler = _batched("app.test.batched")
    try:
        log_fields(logger, logging.WARNING, "outside a loop", {})  # written at once
        assert len(stream.writes) == 1

        async def burst() -> int:
            for n in range(5):
                log_fields(logger, logging.WARNING, f"line {n}", {"n": n})
            written = len(stream.writes)  # nothing yet: the write waits for the iteration's end
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            return written

        assert asyncio.run(burst()) == 1
        assert len(stream.writes) == 2
        assert [json.loads(line)["message"] for line in stream.writes[1].splitlines()] == [
            f"line {n}" for n in range(5)
        ]

        async def then_a_record() -> int:
            log_fields(logger, logging.WARNING, "queued", {})
            logger.warning("a record")  # written at once, after what was queued
            return len(stream.writes)

        assert asyncio.run(then_a_record()) == 3
        assert [json.loads(line)["message"] for line in stream.writes[2].splitlines()] == [
            "queued",
            "a record",
        ]
    finally:
        logger.removeHandler(handler)


def test_log_fields_writes_the_line_logger_log_would_and_defers_to_other_handlers() -> None:
    class Stream:
        def __init__(self) -> None:
            self.text = ""

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    fields = {"uid": "u-9", "denied_by": ["dra-only"], "dry_run": False, "path": Path("/x")}
    logger = logging.getLogger("app.test.fields")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    lines = []
    for write in (
        lambda: logger.log(logging.INFO, "review denied", extra=fields),
        lambda: log_fields(logger, logging.INFO, "review denied", fields),
    ):
        stream = Stream()
        handler = JsonLinesHandler(stream)
        handler.setFormatter(JsonLines())
        logger.addHandler(handler)
        try:
            write()
        finally:
            logger.removeHandler(handler)
        (line,) = [json.loads(text) for text in stream.text.splitlines()]
        del line["time"]
        lines.append(line)
    assert lines[0] == lines[1]
    assert lines[1]["path"] == "/x" and lines[1]["level"] == "INFO"

    captured: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    capture = Capture()
    logger.addHandler(capture)
    try:
        log_fields(logger, logging.INFO, "review denied", fields)
        logger.setLevel(logging.WARNING)  # restored below: NOTSET
        log_fields(logger, logging.INFO, "not enabled", fields)
    finally:
        logger.removeHandler(capture)
    logger.setLevel(logging.NOTSET)
    (record,) = captured  # a handler that wants records gets one, through logger.log
    assert record.getMessage() == "review denied" and record.__dict__["uid"] == "u-9"


_KEYS = st.one_of(st.text(max_size=6), st.integers(-5, 5), st.booleans(), st.none(), st.floats())
_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(),
        st.builds(Path, st.text(max_size=5)),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=10), _VALUES, max_size=8))
def test_a_line_is_encoded_as_the_stdlib_encoder_writes_it(line: dict[str, Any]) -> None:
    stdlib = json.JSONEncoder(default=str)
    assert JsonLines()._encode(line) == stdlib.encode(line)


def test_a_value_that_refers_to_itself_is_refused_as_the_stdlib_encoder_refuses_it() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular reference"):
        JsonLines()._encode({"uid": "u", "loop": loop})


@given(
    st.dictionaries(
        st.one_of(st.sampled_from(["time", "level", "logger", "message", "uid"]), st.text()),
        _VALUES,
        max_size=6,
    ),
    st.text(max_size=12),
    st.text(max_size=12),
    st.sampled_from([logging.DEBUG, logging.INFO, logging.WARNING, 25]),
)
def test_a_line_without_a_record_is_the_line_format_writes(
    fields: dict[str, Any], name: str, message: str, level: int
) -> None:
    formatter = JsonLines()
    line = formatter.format_fields(name, level, message, fields)
    stamp = json.loads(line)["time"] if "time" not in fields else fields["time"]
    merged = {
        "time": stamp,
        "level": logging.getLevelName(level),
        "logger": name,
        "message": message,
        **fields,
    }
    assert line == json.JSONEncoder(default=str).encode(merged)


_SHAPED_KEYS = st.one_of(
    st.sampled_from(["time", "level", "logger", "message", "uid", "namespace"]), st.text()
)


@given(
    st.lists(st.tuples(_SHAPED_KEYS, _VALUES, st.booleans()), max_size=8, unique_by=lambda k: k[0]),
    st.text(max_size=12),
    st.sampled_from([logging.DEBUG, logging.INFO, 25]),
)
def test_a_shaped_line_is_the_line_format_fields_writes_first_time_and_from_the_cache(
    pairs: list[tuple[str, Any, bool]], message: str, level: int
) -> None:
    formatter = JsonLines()
    formatter._time = lambda created: "2026-12-06 10:00:00,000"  # type: ignore[method-assign]
    keys = tuple(key for key, _, _ in pairs)
    values = tuple(value for _, value, _ in pairs)
    shape = LineShape(*keys, repeating=frozenset(key for key, _, kept in pairs if kept))
    fields = dict(zip(keys, values, strict=True))
    expected = formatter.format_fields("app.x", level, message, fields)
    assert formatter.format_line("app.x", level, message, shape, values) == expected
    assert formatter.format_line("app.x", level, message, shape, values) == expected  # cached


def test_runs_of_equal_values_under_other_keys_are_kept_apart() -> None:
    formatter = JsonLines()
    shape = LineShape("kind", "uid", "namespace", repeating=frozenset({"kind", "namespace"}))
    first = json.loads(formatter.format_line("app.x", logging.INFO, "m", shape, ("a", "u", "b")))
    again = json.loads(formatter.format_line("app.x", logging.INFO, "m", shape, ("b", "u", "a")))
    assert (first["kind"], first["namespace"]) == ("a", "b")
    assert (again["kind"], again["namespace"]) == ("b", "a")


def test_a_shape_keeps_at_most_its_bound_of_distinct_values() -> None:
    formatter = JsonLines()
    shape = LineShape("uid", "namespace", repeating=frozenset({"namespace"}))
    for n in range(LineShape.KEPT + 50):
        line = formatter.format_line("app.x", logging.INFO, "m", shape, ("u", f"ns-{n}"))
        assert json.loads(line)["namespace"] == f"ns-{n}"
    assert len(shape._cache) == LineShape.KEPT
    assert shape._cache.evictions == 50 and shape._cache.name == CacheName.LOG_LINES
    with pytest.raises(ValueError, match="2 keys"):
        formatter.format_line("app.x", logging.INFO, "m", shape, ("u",))


def test_log_line_goes_through_logger_log_where_a_handler_needs_a_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shape = LineShape("uid", "denied_by", repeating=frozenset({"denied_by"}))
    with caplog.at_level(logging.INFO, logger="app.shaped"):
        log_line(
            logging.getLogger("app.shaped"), logging.INFO, "review denied", shape, ("u", ("x",))
        )
    (record,) = caplog.records
    assert record.getMessage() == "review denied"
    assert (record.__dict__["uid"], record.__dict__["denied_by"]) == ("u", ("x",))


_DECISION = LineShape("uid", "namespace", repeating=frozenset({"namespace"}))


def test_a_batch_logs_a_turns_lines_in_the_next_turn_in_one_write_each_at_its_own_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logger, stream, handler = _batched("app.test.line_batch")
    batch = LineBatch(logger)
    start = time.mktime((2026, 12, 7, 10, 0, 0, 0, 0, -1))
    clock = iter([start + n / 1000 + 0.0002 for n in range(40)])  # a ms apart as logged
    monkeypatch.setattr("app.logs.time.time", lambda: next(clock, start + 5.0))
    try:

        async def turn() -> int:
            for n in range(40):
                batch.log(logging.INFO, "review denied", _DECISION, (f"u-{n}", "ns"))
            written = len(stream.writes)  # nothing yet: queued as values
            await asyncio.sleep(0)  # (written now, at start + 5 s)
            return written

        assert asyncio.run(turn()) == 0
        (text,) = stream.writes  # the turn's lines in one write
        lines = [json.loads(line) for line in text.splitlines()]
        assert [line["uid"] for line in lines] == [f"u-{n}" for n in range(40)]
        assert {line["namespace"] for line in lines} == {"ns"}
        assert [line["time"] for line in lines] == [
            f"2026-12-07 10:00:00,{n:03d}" for n in range(40)
        ]  # each at the time it was logged, not the write's

        batch.log(logging.DEBUG, "review allowed", _DECISION, ("u-d", "ns"))  # below the level
        batch.log(logging.INFO, "outside a loop", _DECISION, ("u-o", "ns"))  # logged at once
        assert [json.loads(line)["uid"] for line in stream.writes[-1].splitlines()] == ["u-o"]
        assert len(stream.writes) == 2
    finally:
        logger.removeHandler(handler)


def test_a_batch_says_a_line_it_cannot_format_and_keeps_the_others() -> None:
    logger, stream, handler = _batched("app.test.line_batch_bad")
    batch = LineBatch(logger)
    loop: list[Any] = []
    loop.append(loop)  # (a value that refers to itself: no JSON for it)
    try:
        with pytest.raises(ValueError, match="1 values for the 2 keys"):
            batch.log(logging.INFO, "review denied", _DECISION, ("u-1",))

        async def turn() -> None:
            batch.log(logging.INFO, "review denied", _DECISION, ("u-1", "ns"))
            batch.log(logging.INFO, "review denied", _DECISION, (loop, "ns"))
            batch.log(logging.INFO, "review denied", _DECISION, ("u-3", "ns"))
            await asyncio.sleep(0)

        asyncio.run(turn())
        lines = [json.loads(line) for text in stream.writes for line in text.splitlines()]
        said = [line for line in lines if line["message"].startswith("a 'review denied' line")]
        assert len(said) == 1 and "Circular reference" in said[0]["exc_info"]
        assert [line["uid"] for line in lines if "uid" in line] == ["u-1", "u-3"]
    finally:
        logger.removeHandler(handler)


def test_a_batch_written_early_at_shutdown_reaches_records_handlers_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("app.test.line_batch_records")
    batch = LineBatch(logger)
    with caplog.at_level(logging.INFO, logger=logger.name):

        async def turn() -> int:
            batch.log(logging.INFO, "review denied", _DECISION, ("u-1", "ns"))
            queued = len(caplog.records)
            batch.write()  # (the lifespan's end: what is queued is logged)
            await asyncio.sleep(0)  # (the write the turn scheduled finds nothing left)
            await asyncio.sleep(0)
            return queued

        assert asyncio.run(turn()) == 0
    (record,) = caplog.records
    assert (record.getMessage(), record.__dict__["uid"]) == ("review denied", "u-1")


def test_a_batch_says_a_line_a_records_handler_refuses_and_keeps_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("app.test.line_batch_refused")
    batch = LineBatch(logger)
    clashing = LineShape("msg", "uid")  # (a LogRecord's own attribute: `extra` may not set it)
    with caplog.at_level(logging.INFO, logger=logger.name):

        async def turn() -> None:
            batch.log(logging.INFO, "review denied", clashing, ("m", "u-1"))
            batch.log(logging.INFO, "review denied", _DECISION, ("u-2", "ns"))
            await asyncio.sleep(0)

        asyncio.run(turn())
    said, kept = caplog.records
    assert said.getMessage() == "a 'review denied' line could not be written"
    assert said.exc_info is not None and said.exc_info[0] is KeyError
    assert (kept.getMessage(), kept.__dict__["uid"]) == ("review denied", "u-2")
