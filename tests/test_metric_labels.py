"""Metric labels come from closed sets: a review cannot grow the exposition.

A 1 MB `kind` in a review used to become a label value of the latency histogram (one series per
distinct kind, each line carrying the whole string): 796 MB of RSS at the next scrape.
"""

from __future__ import annotations

from app.metrics import Metrics
from tests.conftest import AppHarness, load_fixture


def test_a_kind_the_webhook_does_not_handle_is_labelled_other(app: AppHarness) -> None:
    body = load_fixture("pod-create-legacy-gpu")
    body["request"]["kind"] = {"group": "", "version": "v1", "kind": "K" * 100_000}
    assert app.answer("validate", body)["allowed"] is True
    text = app.client.get("/metrics").text
    assert "KKKK" not in text
    assert 'kind="other"' in text
    assert len(text) < 100_000


def test_a_handled_kind_keeps_its_label(app: AppHarness) -> None:
    app.answer("validate", load_fixture("pod-create-legacy-gpu"))
    assert 'kind="Pod"' in app.client.get("/metrics").text


def test_every_label_value_is_from_a_closed_set() -> None:
    metrics = Metrics()
    metrics.observe_review("validate", "X" * 1000, "weird-decision", 0.001)
    metrics.count_denial("mutate", "no-such-check\n")
    metrics.count_check_error("validate", "y" * 1000)
    text = metrics.render().decode()
    assert "XXXX" not in text and "yyyy" not in text and "no-such-check" not in text
    assert "weird-decision" not in text
