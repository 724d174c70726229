"""The collector is held off while the view syncs, and the long-lived heap frozen after it."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

import pytest

from app.server import heap


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    yield
    heap.settle()
    gc.enable()


def test_the_collector_is_off_until_the_heap_is_settled_then_frozen() -> None:
    heap.hold()
    assert not gc.isenabled()
    heap.settle()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0


def test_a_sync_that_never_ends_does_not_keep_the_collector_off() -> None:
    heap.hold(seconds=0.01)
    deadline = time.monotonic() + 10
    while not gc.isenabled() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gc.isenabled()


def test_a_collector_turned_off_by_someone_else_is_left_off() -> None:
    gc.disable()
    heap.hold()
    heap.settle()
    assert not gc.isenabled()
