"""A few seconds of the overload test (loadtest/overload.py; `make overload` is the full 60 s at
1,000 connections, figures in docs/benchmarks.md): the same properties, checked on a short run
with fewer connections, the server on loopback stopped by its pid at the end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow
OVERLOAD = ROOT / "loadtest" / "overload.py"


def test_a_short_overload_is_answered_without_5xx_with_fast_probes_and_memory_returned(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(OVERLOAD),
            "--out",
            str(tmp_path),
            "--duration",
            "4",
            "--connections",
            "150",
            "--capacity-seconds",
            "2",
            "--settle",
            "3",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    summary = json.loads((tmp_path / "overload.json").read_text())
    assert summary["checks"] == dict.fromkeys(summary["checks"], True), result.stdout
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary["offered_reviews_per_s"] >= 2 * summary["capacity_reviews_per_s"] - 1
    assert summary["sent"] > 0 and summary["statuses"]
    assert summary["healthz_ms"]["probes"] >= 20
    assert summary["server_exit"] in (0, -15)  # drained on SIGTERM


def test_the_overload_run_is_bounded() -> None:
    for args in (["--duration", "601"], ["--connections", "5001"]):
        result = subprocess.run(
            [sys.executable, str(OVERLOAD), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert result.returncode == 2
        assert "must be in" in result.stderr
