"""One claim cannot stall the webhook (loadtest/hostile_cel.py, a short run; `make hostile-cel`
is the full one, figures in docs/benchmarks.md).

A real `dra-webhook serve` over TLS on 127.0.0.1 (one worker, the default policy); the hostile
claims are built by the script: 8,192 distinct valid selectors within the API server's limits,
10,000 requests, and 1,024 selectors no review sent before. For each, four connections send it
back to back while captured pod creates and health probes are timed.

The bounds here are generous: the machine is shared, and a test is no benchmark. They still
tell the fix from the fault: before the compile budget, the 8,192-selector claim took about 2 s
to answer and an ordinary review waited up to 1.8 s behind four of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow
HOSTILE = ROOT / "loadtest" / "hostile_cel.py"


def test_hostile_claims_are_answered_at_once_naming_the_budget_and_hold_nobody_up(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(HOSTILE),
            "--out",
            str(tmp_path),
            "--duration",
            "4",
            "--hostile-within",
            "3",
            "--ordinary-p99-ms",
            "300",
            "--probe-p99-ms",
            "300",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    summary = json.loads((tmp_path / "hostile-cel.json").read_text())
    assert summary["checks"] == dict.fromkeys(summary["checks"], True), result.stdout
    assert result.returncode == 0, result.stdout + result.stderr
    alone = summary["alone"]
    assert "(cel.compileBudget.bytes)" in alone["8,192 selectors (32 x 8 x 32)"]["answer"]
    assert "must have at most 32 items, not 10,000" in alone["10,000 requests"]["answer"]
    assert "(cel.compileBudget." in alone["1,024 new selectors (32 x 8 x 4)"]["answer"]
    for name, phase in summary["phases"].items():
        assert phase["hostile_ms"]["n"] >= 4, name  # each connection answered at least once
        assert phase["ordinary_ms"]["n"] >= 50 and phase["healthz_ms"]["n"] >= 20, name
    assert summary["server_exit"] in (0, -15)


def test_the_hostile_run_is_bounded() -> None:
    for args in (["--duration", "121"], ["--hostile", "17"]):
        result = subprocess.run(
            [sys.executable, str(HOSTILE), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert result.returncode == 2, result.stderr
