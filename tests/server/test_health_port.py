"""The health listener: plain HTTP on its own port, thread and event loop, so that liveness and
readiness probes are answered in milliseconds while the webhook port is saturated."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import statistics
import threading
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.helpers import TlsServer, load_fixture, start_server, stop_server

pytestmark = pytest.mark.slow
REVIEW = orjson.dumps(load_fixture("pod-create-legacy-gpu"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    found = start_server(tmp_path_factory.mktemp("health"))
    yield found
    stop_server(found)


def test_the_health_port_answers_liveness_and_readiness_over_plain_http(
    server: TlsServer,
) -> None:
    assert server.health_port
    with httpx.Client(base_url=f"http://127.0.0.1:{server.health_port}", timeout=2) as client:
        live, ready = client.get("/healthz"), client.get("/readyz")
        missing = client.get("/mutate")
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()) == (200, {"ready": True})
    assert missing.status_code == 404


async def _hammer(server: TlsServer, connections: int, stop: threading.Event) -> int:
    """Keep `connections` keep-alive connections busy with reviews until `stop`; answers seen."""
    host, port = server.base_url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=server.ca)
    request = (
        f"POST /validate?timeout=10s HTTP/1.1\r\nHost: w\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(REVIEW)}\r\n\r\n"
    ).encode() + REVIEW
    answers = 0

    async def one() -> None:
        nonlocal answers
        reader, writer = await asyncio.open_connection(host, int(port), ssl=context)
        try:
            while not stop.is_set():
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                answers += 1
        finally:
            writer.close()
            # closed before asyncio.run ends the loop: else the sockets are left to the
            # garbage collector, whose ResourceWarnings fail whichever test runs next
            with contextlib.suppress(OSError, ssl.SSLError, asyncio.TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 5)

    await asyncio.gather(*(one() for _ in range(connections)), return_exceptions=True)
    return answers


def test_probes_stay_fast_while_the_webhook_port_is_saturated(server: TlsServer) -> None:
    stop = threading.Event()
    answered: list[int] = []
    load = threading.Thread(
        target=lambda: answered.append(asyncio.run(_hammer(server, 200, stop))), daemon=True
    )
    load.start()
    time.sleep(1.0)  # let the load build up
    took: list[float] = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.health_port}", timeout=5) as probe:
            for _ in range(30):
                started = time.perf_counter()
                assert probe.get("/healthz").status_code == 200
                took.append(time.perf_counter() - started)
                time.sleep(0.05)
    finally:
        stop.set()
        load.join(15)
    assert answered and answered[0] > 100, "the webhook port was not under load"
    assert statistics.median(took) < 0.1, took
    assert max(took) < 1.0, took
