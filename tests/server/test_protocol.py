"""The limited httptools protocol, beyond the limits themselves (tests/server/test_limits.py):
pipelined requests, heads counted however the reads fall, a response written as one piece."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from uvicorn.protocols.http.flow_control import FlowControl

from app.server.cycle import Cycle
from tests.helpers import TlsServer, load_fixture, start_server, stop_server
from tests.server.helpers import LIMITS, closed_within, connect, head, read_response

REVIEW = orjson.dumps(load_fixture("pod-create-legacy-gpu"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    found = start_server(tmp_path_factory.mktemp("protocol"), env=LIMITS)
    yield found
    stop_server(found)


def _review(uid: str, pad: int = 0) -> bytes:
    body = load_fixture("pod-create-legacy-gpu")
    body["request"]["uid"] = uid
    if pad:
        body["request"]["object"]["metadata"]["annotations"] = {"pad": "x" * pad}
    return orjson.dumps(body)


def _uid(response: bytes) -> str:
    body = response.partition(b"\r\n\r\n")[2]
    uid: str = orjson.loads(body)["response"]["uid"]
    return uid


@pytest.mark.slow
def test_pipelined_reviews_on_one_connection_are_answered_in_order(server: TlsServer) -> None:
    bodies = [_review(f"uid-{n}") for n in range(3)]
    with connect(server) as sock:
        sock.sendall(b"".join(head(length=len(body)) + body for body in bodies))
        answers = [read_response(sock) for _ in bodies]
    assert [status for status, _ in answers] == [200, 200, 200]
    assert [_uid(response) for _, response in answers] == ["uid-0", "uid-1", "uid-2"]


@pytest.mark.slow
def test_a_pipelined_head_over_the_limit_is_refused_though_it_began_in_the_read_before(
    server: TlsServer,
) -> None:
    big = head(extra=f"X-Big: {'a' * 9000}\r\n")  # over the 8192 bytes of LIMITS
    with connect(server) as sock:
        sock.sendall(head() + REVIEW + big + REVIEW)
        statuses = []
        while (status := read_response(sock)[0]) != 0:
            statuses.append(status)
    assert statuses[-1] == 431


@pytest.mark.slow
def test_a_small_head_read_together_with_a_large_body_is_not_taken_for_a_large_head(
    server: TlsServer,
) -> None:
    body = _review("uid-big", pad=200_000)  # one send: the first read holds far over 8192 bytes
    with connect(server) as sock:
        sock.sendall(head(length=len(body)) + body)
        status, response = read_response(sock)
    assert status == 200, response[:300]
    assert _uid(response) == "uid-big"


@pytest.mark.slow
def test_a_connection_left_idle_after_an_answer_is_closed(server: TlsServer) -> None:
    with connect(server) as sock:
        sock.sendall(head() + REVIEW)
        assert read_response(sock)[0] == 200
        assert closed_within(sock, 4)  # idle timeout 1 s, swept


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _cycle(method: str = "POST", keep_alive: bool = True) -> tuple[Cycle, _Transport]:
    transport = _Transport()
    scope: Any = {"method": method, "http_version": "1.1"}
    cycle = Cycle(
        scope=scope,
        transport=transport,  # type: ignore[arg-type]
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=None,  # type: ignore[arg-type]
        access_logger=None,  # type: ignore[arg-type]
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: None,
    )
    return cycle, transport


async def _respond(cycle: Cycle, body: bytes) -> None:
    headers = [(b"content-length", b"%d" % len(body)), (b"content-type", b"application/json")]
    await cycle.send({"type": "http.response.start", "status": 200, "headers": headers})
    await cycle.send({"type": "http.response.body", "body": body})


@pytest.mark.parametrize("keep_alive", [True, False])
def test_a_response_is_written_as_one_piece(keep_alive: bool) -> None:
    cycle, transport = _cycle(keep_alive=keep_alive)
    asyncio.run(_respond(cycle, b'{"ok":true}'))
    assert len(transport.writes) == 1
    head, _, body = transport.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n")
    assert body == b'{"ok":true}'
    assert cycle.response_complete
    assert transport.closed is not keep_alive


def test_the_head_of_a_response_without_a_body_is_still_written() -> None:
    cycle, transport = _cycle(method="HEAD", keep_alive=False)
    asyncio.run(_respond(cycle, b""))
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.closed
