"""The whole server in process, without TLS or sockets: request bytes into the limited httptools
protocol, through the admission front, the handler and the pipeline, to response bytes.

What `perf-ratio` measures over TLS, minus TLS and the kernel: the protocol's, the handler's
and the pipeline's share of a review, in CPU time of this process (steady enough to compare
runs on a shared machine). Run: make bench.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
import uvloop

from app.config import Settings
from app.server.protocol import LimitedHttpToolsProtocol
from app.transport.app import create_app
from tests.helpers import ROOT, load_fixture, review
from tests.inprocess import Connection
from tests.inprocess import raw_request as _request

CASES = {
    "legacy pod, denied (dra-only)": load_fixture("pod-create-legacy-gpu"),
    "pod with claims, allowed": load_fixture("pod-create-with-resourceclaims"),
    "legacy pod, translated": review("pod-create-legacy-gpu", namespace="ml-research"),
    "claim with 3 CEL selectors": orjson.loads(
        (ROOT / "tests/fixtures/reviews/resourceclaim-create-cel-selectors.json").read_bytes()
    ),
}


BATCH = 100
"""Reviews per timed round (one loop run): the figures are per 100 reviews."""


@pytest.fixture(scope="module")
def serve() -> Iterator[Callable[[bytes], bytes]]:
    """One connection of the real app on a uvloop loop: a request's bytes in, sent `BATCH`
    times one after the other; the last response's bytes out."""
    logging.getLogger("app").setLevel(logging.CRITICAL)  # the decision lines go nowhere
    loop = uvloop.new_event_loop()
    # the embedded demo cluster and default policy, as `dra-webhook serve` (and perf-ratio)
    connection = Connection(create_app(Settings()), LimitedHttpToolsProtocol, loop)
    yield lambda raw: loop.run_until_complete(connection.send(raw, BATCH))
    connection.close()
    loop.close()
    logging.getLogger("app").setLevel(logging.NOTSET)


@pytest.mark.benchmark(timer=time.process_time)  # CPU time: the machine may be shared
@pytest.mark.parametrize("case", list(CASES))
def test_100_reviews_through_protocol_and_app(
    benchmark: Any, serve: Callable[[bytes], bytes], case: str
) -> None:
    raw = _request(orjson.dumps(CASES[case]))
    assert serve(raw).startswith(b"HTTP/1.1 200 OK\r\n")
    benchmark(serve, raw)
