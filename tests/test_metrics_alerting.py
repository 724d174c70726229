"""The metrics the chart's alerts need from the webhook itself (tests/alerts tests the rules)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path

from app.certs import mint
from app.cluster.view import ClusterView, Kind
from app.config import Settings
from app.metrics import LATENCY_BUCKETS, Metrics
from tests.helpers import AppHarness


def _value(text: str, name: str) -> float:
    (found,) = re.findall(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(found)


def test_metrics_show_the_serving_certificates_not_after_and_follow_a_rotation(
    make_app: Callable[..., AppHarness], tmp_path: Path
) -> None:
    mint(tmp_path, days=20)
    harness = make_app(settings=Settings(cert_dir=tmp_path))
    name = "dra_webhook_serving_certificate_expiry_timestamp_seconds"
    shown = _value(harness.client.get("/metrics").text, name)
    in_days = (shown - dt.datetime.now(dt.UTC).timestamp()) / 86400
    assert 19 < in_days <= 20
    mint(tmp_path, days=200)  # rotated on disk: the next handshake serves it, the metric says so
    rotated = _value(harness.client.get("/metrics").text, name)
    assert 199 < (rotated - dt.datetime.now(dt.UTC).timestamp()) / 86400 <= 200


def test_ready_is_1_for_a_synced_view_and_0_before_every_kind_is_listed() -> None:
    metrics = Metrics()
    view = ClusterView()
    metrics.observe_view(view)
    assert _value(metrics.render().decode(), "dra_webhook_ready") == 0
    synced = ClusterView()
    for kind in Kind:
        synced.replace(kind, [])
    metrics.observe_view(synced)
    assert _value(metrics.render().decode(), "dra_webhook_ready") == 1


def test_latency_buckets_reach_the_largest_webhook_timeout() -> None:
    # p99 above half of any timeoutSeconds (1-30) must land between two finite buckets
    assert LATENCY_BUCKETS[-1] >= 30
    assert list(LATENCY_BUCKETS) == sorted(LATENCY_BUCKETS)
