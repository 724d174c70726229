"""Metric labels come from closed sets: a review cannot grow the exposition.

A 1 MB `kind` in a review used to become a label value of the latency histogram (one series per
distinct kind, each line carrying the whole string): 796 MB of RSS at the next scrape.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import yaml

from app.config.policy import parse_policy
from app.metrics import Metrics
from tests.dra_only_cases import EXCEPTIONS, GPU, container
from tests.helpers import AppHarness, load_fixture, namespace, wrap


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


def test_an_excepted_review_is_counted_by_check_and_exception_name(
    make_app: Callable[..., AppHarness],
) -> None:
    policy = parse_policy(yaml.safe_dump({"exceptions": EXCEPTIONS}), "test policy")
    app = make_app([namespace("team", "dra-only", exceptions="allowed")], policy)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team", "labels": {"exception": "vendor"}},
        "spec": {"containers": [container("cuda", limits={GPU: "1"})]},
    }
    answer = app.answer("validate", wrap(pod))
    assert answer["allowed"] is True
    assert "exception vendor-image until 2999-12-31" in answer["warnings"][0]
    text = app.client.get("/metrics").text
    assert 'dra_webhook_exceptions_total{check="dra-only",exception="vendor-image"} 1.0' in text


def test_the_exception_label_is_one_of_the_policys_names() -> None:
    metrics = Metrics()
    metrics.know_exceptions({"vendor-image": dt.datetime(3000, 1, 1, tzinfo=dt.UTC)})
    metrics.count_exception("dra-only", "vendor-image")
    metrics.count_exception("dra-only", "z" * 1000)
    text = metrics.render().decode()
    assert 'exception="vendor-image"' in text and 'exception="other"' in text
    assert "zzzz" not in text
