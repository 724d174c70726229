"""House rules a reviewer would otherwise have to count by hand (docs/developing.md).

- No module of app/ runs past 500 lines: past that a module has grown a second job, and the
  split goes by job (a package per job), not by line count.
- No test module imports another test module or a conftest: what tests share lives in a helpers
  module (`tests/helpers.py`, `tests/<package>/helpers.py`), fixtures in conftest files, so a
  test file can be moved or deleted without breaking another.
"""

from __future__ import annotations

import ast
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


def _imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_test_module_imports_another_test_module_or_a_conftest() -> None:
    offending = {
        str(path.relative_to(ROOT)): sorted(
            name
            for name in _imported(path)
            if name.startswith("tests.")
            and (name.rsplit(".", 1)[-1].startswith("test_") or name.endswith(".conftest"))
        )
        for path in sorted((ROOT / "tests").rglob("*.py"))
    }
    offending = {path: names for path, names in offending.items() if names}
    assert not offending, f"move what they share to a helpers module: {offending}"
