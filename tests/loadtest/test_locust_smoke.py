"""A short, bounded locust run on loopback through the real runner (loadtest/run).

The full run and its numbers are in docs/loadtest.md; this one only proves the whole path works:
fresh certificates, the real server over TLS, locust headless, every answer checked, the files
written, the server stopped, and a non-zero exit when answers are wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadtest.scenarios import SCENARIOS
from tests.helpers import ROOT

RUNNER = ROOT / "loadtest" / "runner.py"

pytestmark = pytest.mark.slow


def _run(out: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    result = subprocess.run(
        [sys.executable, str(RUNNER), "--out", str(out), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return result.returncode, summary, result.stdout + result.stderr


def _stopped(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_short_locust_run_against_the_webhook_has_no_failed_request(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, summary, output = _run(out, "--target", "webhook", "--duration", "3", "--users", "4")

    assert code == 0, output
    run = summary["runs"]["webhook"]
    assert run["failures"] == 0
    assert run["requests"] > 0 and run["rps"] > 0
    assert 0 < run["latency_ms"]["p50"] <= run["latency_ms"]["p95"] <= run["latency_ms"]["p99"]
    assert run["server_cpu_us_per_review"] > 0
    # The weighted mix reached the server: every scenario was sent at least once.
    assert set(run["scenarios"]) == {scenario.name for scenario in SCENARIOS}
    assert (out / "latency.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "summary.csv").read_text().startswith("target,requests,failures,rps")
    assert all(_stopped(pid) for pid in run["server_pids"])


def test_the_runner_fails_when_an_answer_is_wrong(tmp_path: Path) -> None:
    """The bare echo admits everything; checked against the webhook's decisions, it fails."""
    out = tmp_path / "run"
    code, summary, output = _run(
        out,
        "--target",
        "echo",
        "--check-decisions",
        "on",
        "--duration",
        "2",
        "--users",
        "2",
        "--no-plot",
    )

    assert code == 1, output
    run = summary["runs"]["echo"]
    assert 0 < run["failures"] < run["requests"]
    failures = (out / "locust-echo_failures.csv").read_text()
    assert "allowed=True, expected False" in failures
    assert all(_stopped(pid) for pid in run["server_pids"])


def test_the_runner_says_why_when_locust_cannot_start(tmp_path: Path) -> None:
    """A missing fixture kills locust before its first request: one line says so, exit 1."""
    result = subprocess.run(
        [sys.executable, str(RUNNER), "--out", str(tmp_path / "run"), "--target", "webhook",
         "--duration", "2", "--users", "1", "--no-plot"],
        check=False, capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "DRA_LOADTEST_FIXTURES": str(tmp_path / "nothing-here")},
    )  # fmt: skip

    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("loadtest: locust sent no request to the webhook")
    assert "nothing-here/" in line and "is missing" in line
    assert not (tmp_path / "run" / "summary.json").exists()
