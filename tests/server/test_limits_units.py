"""The pieces of the transport limits that need no server: the API server's timeout, the body
budget, the queueing check and the memory trimmer's trigger."""

from __future__ import annotations

import pytest

from app.server.limits import ByteBudget, OverloadedError, caller_timeout, check_queue_time
from app.server.memory import CLOSED_CONNECTIONS, RELEASED_BYTES, Trimmer


@pytest.mark.parametrize(
    ("query", "seconds"),
    [
        (b"timeout=10s", 10.0),
        (b"timeout=5s&x=1", 5.0),
        (b"a=b&timeout=1500ms", 1.5),
        (b"timeout=1m", 60.0),
        (b"timeout=7", 7.0),
        (b"", None),
        (b"timeout=soon", None),
        (b"mytimeout=3s", None),
    ],
)
def test_the_api_servers_timeout_is_read_from_the_query(
    query: bytes, seconds: float | None
) -> None:
    assert caller_timeout(query) == seconds


def test_a_review_is_refused_after_the_queue_limit_or_its_callers_timeout() -> None:
    check_queue_time(1.9, 2.0, b"timeout=10s")
    with pytest.raises(OverloadedError) as refused:
        check_queue_time(2.1, 2.0, b"timeout=10s")
    assert refused.value.reason == "queue"
    with pytest.raises(OverloadedError):
        check_queue_time(1.1, 2.0, b"timeout=1s")  # the caller gave up after 1 s


def test_the_body_budget_refuses_what_does_not_fit_and_takes_back_what_is_given() -> None:
    budget = ByteBudget(100)
    budget.take(60)
    with pytest.raises(OverloadedError) as refused:
        budget.take(41)
    assert refused.value.reason == "buffered_bytes"
    budget.give(60)
    budget.take(100)
    assert budget.used == 100


def test_the_trimmer_waits_for_a_burst_to_end() -> None:
    totals = [0, 0]
    trimmer = Trimmer(lambda: (totals[0], totals[1]))
    assert not trimmer.burst_ended()
    totals[0] = CLOSED_CONNECTIONS - 1
    assert not trimmer.burst_ended()
    totals[0] = CLOSED_CONNECTIONS
    assert trimmer.burst_ended()
    totals[:] = [0, RELEASED_BYTES]
    assert trimmer.burst_ended()
