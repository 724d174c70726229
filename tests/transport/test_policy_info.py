"""The policy in force is named where an operator looks first: a startup log line and a gauge."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from app.cluster.static import StaticSource
from app.cluster.view import ClusterView
from app.config import Settings
from app.metrics import Metrics
from app.transport.app import create_app


def test_the_policy_file_in_force_is_logged_and_exposed_with_its_hash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = "namespaceModes: {label: team-gpu}\n"
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    metrics = Metrics()
    with caplog.at_level(logging.INFO, logger="app.transport.app"):
        create_app(Settings(policy_file=path), source=StaticSource(ClusterView()), metrics=metrics)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    (record,) = [r for r in caplog.records if r.getMessage() == "policy in force"]
    assert (record.source, record.sha256) == (str(path), digest)  # type: ignore[attr-defined]
    rendered = metrics.render().decode()
    assert f'dra_webhook_policy_info{{sha256="{digest}",source="{path}"}} 1.0' in rendered
