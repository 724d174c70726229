"""House rules a reviewer would otherwise have to count by hand (docs/developing.md).

- No module of app/ runs past 500 lines: past that a module has grown a second job, and the
  split goes by job (a package per job), not by line count.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 500


def test_no_module_of_app_runs_past_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / "app").rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these by job (docs/developing.md): {long}"
