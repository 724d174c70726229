"""A small POST answered without a task (app.server.limits ANSWER_NOW): the protocol asks the
app once the body is in, writes what it gives, and serves the request the usual way where it
gives nothing, cannot write it at once, or is not asked."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import uvloop

from app.server.protocol import LimitedHttpToolsProtocol
from tests.inprocess import Connection, raw_request

BODY = b'{"review": 1}'


class App:
    """An ASGI app that answers POSTs itself (`__call__`, reading the body) and, unless told
    otherwise, at once (`answer_now`); it records which way each request went."""

    def __init__(self, now: str = "answer") -> None:
        self.now = now
        self.calls: list[tuple[str, bytes]] = []

    def answer_now(
        self, scope: Any, body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        self.calls.append(("now", body))
        if self.now == "raise":
            raise RuntimeError("a bug")
        if self.now == "decline":
            return None
        text = b"now:" + body
        return 200, [(b"content-length", b"%d" % len(text))], text

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            message = await receive()
            while message["type"] != "lifespan.shutdown":
                await send({"type": message["type"] + ".complete"})
                message = await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.calls.append(("task", body))
        text = b"task:" + body
        headers = [(b"content-length", b"%d" % len(text))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": text})


def _connect(app: App) -> Connection:
    """A connection as the server serves it: without uvicorn's access log (`answer` declines
    to write while it is on; pytest's capture handlers would turn it on here)."""
    connection = Connection(app, LimitedHttpToolsProtocol, uvloop.new_event_loop())
    connection.protocol.access_log = False
    return connection


def _send(app: App, raw: bytes, *, times: int = 1) -> tuple[Connection, bytes]:
    connection = _connect(app)
    answer = connection.loop.run_until_complete(connection.send(raw, times))
    return connection, answer


def _body(answer: bytes) -> bytes:
    return answer.partition(b"\r\n\r\n")[2]


def test_a_small_post_is_answered_at_once_without_a_task() -> None:
    app = App()
    connection, answer = _send(app, raw_request(BODY), times=3)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert _body(answer) == b"now:" + BODY
    assert app.calls == [("now", BODY)] * 3
    assert not connection.protocol.tasks  # (none was started, none is left)
    connection.close()


def test_a_post_the_app_declines_is_served_by_its_task_with_the_body_read_as_usual() -> None:
    app = App(now="decline")
    connection, answer = _send(app, raw_request(BODY))
    assert _body(answer) == b"task:" + BODY
    assert app.calls == [("now", BODY), ("task", BODY)]
    connection.close()


def test_a_bug_in_answer_now_leaves_the_request_to_the_task_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App(now="raise")
    with caplog.at_level(logging.ERROR, logger="uvicorn.error"):
        connection, answer = _send(app, raw_request(BODY))
    assert _body(answer) == b"task:" + BODY
    assert "answer_now raised" in caplog.text
    connection.close()


@pytest.mark.parametrize(
    "raw",
    [
        raw_request(BODY).replace(b"POST", b"PUT", 1),
        # no declared length (chunked): its body may come in parts the app must bound
        raw_request(BODY)
        .replace(b"Content-Length: %d" % len(BODY), b"Transfer-Encoding: chunked")
        .replace(BODY, b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)),
        # over what is buffered without pausing the reads
        raw_request(b" " * 70_000 + BODY),
    ],
    ids=["not-a-post", "chunked", "large"],
)
def test_other_requests_are_served_by_their_task_and_the_app_is_not_asked(raw: bytes) -> None:
    app = App()
    connection, answer = _send(app, raw)
    assert _body(answer).startswith(b"task:")
    assert [way for way, _ in app.calls] == ["task"]
    connection.close()


def test_an_answer_that_cannot_be_written_at_once_is_sent_in_turn_not_made_again() -> None:
    app = App()
    connection = _connect(app)
    loop = connection.loop
    connection.protocol.flow.pause_writing()  # (the peer reads slowly: `answer` declines)

    async def send_then_drain() -> bytes:
        connection.transport.written = b""
        connection.transport.answered = loop.create_future()
        connection.protocol.data_received(raw_request(BODY))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        connection.protocol.flow.resume_writing()
        return await connection.transport.answered

    answer = loop.run_until_complete(send_then_drain())
    assert _body(answer) == b"now:" + BODY
    assert app.calls == [("now", BODY)]
    connection.close()


def test_a_connection_lost_before_its_turn_is_neither_answered_nor_served() -> None:
    app = App()
    connection = _connect(app)
    loop = connection.loop

    async def send_then_lose() -> None:
        connection.protocol.data_received(raw_request(BODY))
        connection.protocol.connection_lost(None)
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    loop.run_until_complete(send_then_lose())
    assert app.calls == []
    assert connection.transport.written == b""
    loop.run_until_complete(connection.lifespan.shutdown())


def test_a_client_waiting_for_100_continue_is_told_to_go_on_by_the_task() -> None:
    """Its body comes when the task first reads it (uvicorn writes 100 Continue then): the
    request is not held for a body that would not come."""
    app = App()
    connection = _connect(app)
    raw = raw_request(BODY)
    head, _, body = raw.partition(b"\r\n\r\n")

    async def head_then_body() -> bytes:
        connection.protocol.data_received(head + b"\r\nExpect: 100-continue\r\n\r\n")
        for _ in range(5):
            await asyncio.sleep(0)
        asked = connection.transport.written
        connection.protocol.data_received(body)
        for _ in range(5):
            await asyncio.sleep(0)
        return asked

    asked = connection.loop.run_until_complete(head_then_body())
    assert asked.startswith(b"HTTP/1.1 100 Continue")
    assert connection.transport.written.endswith(b"task:" + BODY)
    assert [way for way, _ in app.calls] == ["task"]
    connection.close()
