"""One call per key in flight: concurrent callers share it, its failure, and nothing after."""

from __future__ import annotations

import asyncio

import pytest

from app.cluster.singleflight import SingleFlight

pytestmark = pytest.mark.anyio


class _Calls:
    """A call that waits for `release`, counting how often it was started."""

    def __init__(self, result: str = "done", error: Exception | None = None) -> None:
        self.started = 0
        self.release = asyncio.Event()
        self.result = result
        self.error = error

    async def __call__(self) -> str:
        self.started += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return self.result


async def test_concurrent_callers_for_one_key_share_one_call() -> None:
    flights: SingleFlight[str, str] = SingleFlight()
    call = _Calls()
    waiters = [asyncio.create_task(flights.do("k", call)) for _ in range(10)]
    await asyncio.sleep(0)
    assert "k" in flights and len(flights) == 1
    call.release.set()
    assert await asyncio.gather(*waiters) == ["done"] * 10
    assert call.started == 1
    assert "k" not in flights


async def test_different_keys_run_their_own_calls_concurrently() -> None:
    flights: SingleFlight[str, str] = SingleFlight()
    one, two = _Calls("one"), _Calls("two")
    waiters = [asyncio.create_task(flights.do("a", one)), asyncio.create_task(flights.do("b", two))]
    await asyncio.sleep(0)
    assert len(flights) == 2
    one.release.set()
    two.release.set()
    assert await asyncio.gather(*waiters) == ["one", "two"]


async def test_a_failure_reaches_every_caller_and_is_not_remembered() -> None:
    flights: SingleFlight[str, str] = SingleFlight()
    failing = _Calls(error=RuntimeError("unreachable"))
    waiters = [asyncio.create_task(flights.do("k", failing)) for _ in range(3)]
    await asyncio.sleep(0)
    failing.release.set()
    outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert [str(o) for o in outcomes] == ["unreachable"] * 3
    assert failing.started == 1
    again = _Calls("later")
    again.release.set()
    assert await flights.do("k", again) == "later"  # the next caller starts a new call


async def test_a_caller_that_goes_away_does_not_cancel_the_call_the_others_await() -> None:
    flights: SingleFlight[str, str] = SingleFlight()
    call = _Calls()
    leaving = asyncio.create_task(flights.do("k", call))
    staying = asyncio.create_task(flights.do("k", call))
    await asyncio.sleep(0)
    leaving.cancel()
    await asyncio.sleep(0)
    call.release.set()
    assert await staying == "done"
    assert leaving.cancelled()
    assert call.started == 1
