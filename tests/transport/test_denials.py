"""Denials in the log (app.transport.denials): a storm is one line per window and key, the next
saying how many were held back; a key seen rarely is logged every time; memory is bounded."""

from __future__ import annotations

from app.transport.denials import DenialLog

ML = ("ml-a", ("dra-only",))


def test_the_first_denial_of_a_key_is_logged_and_the_next_ones_in_its_window_are_counted() -> None:
    log = DenialLog(1.0)
    assert log.admit(ML, 10.0) == 0
    assert [log.admit(ML, 10.0 + i / 10) for i in range(1, 10)] == [None] * 9
    assert log.admit(ML, 11.0) == 9  # the window is over: logged, saying the nine held back
    assert log.admit(ML, 11.5) is None
    assert log.admit(ML, 30.0) == 1


def test_keys_are_apart_by_namespace_and_by_the_checks_that_denied() -> None:
    log = DenialLog(1.0)
    assert log.admit(ML, 0.0) == 0
    assert log.admit(("ml-b", ("dra-only",)), 0.1) == 0
    assert log.admit(("ml-a", ("claim-quota",)), 0.2) == 0
    assert log.admit(ML, 0.3) is None


def test_a_window_of_zero_logs_every_denial() -> None:
    log = DenialLog(0)
    assert [log.admit(ML, 5.0) for _ in range(3)] == [0, 0, 0]


def test_at_most_so_many_keys_are_tracked() -> None:
    log = DenialLog(60.0, keys=3)
    for n in range(10):
        assert log.admit((f"ns-{n}", ("dra-only",)), float(n)) == 0
    assert len(log._windows) == 3
    assert log.admit(("ns-0", ("dra-only",)), 10.0) == 0  # forgotten: logged as new
