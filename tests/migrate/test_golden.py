"""Golden tests: realistic manifests through `migrate --diff`, `--write` and a second run.

Each file under golden/manifests/, golden/versions/ and golden/leave-mapped/ is one case;
golden/expected/ holds what `--diff` prints
(`<name>.diff`), what the file reads after `--write` (`<name>`, absent when nothing changes)
and what is reported on stderr (`<name>.stderr`: not translated, warnings, left to the
scheduler; absent when there is nothing to say). The leave-mapped cases run with
`--leave-mapped --cluster-file golden/leave-mapped.cluster.yaml` (a class that maps
`nvidia.com/gpu`).
A new case is one manifest file: `UPDATE_GOLDEN=1 pytest tests/migrate/test_golden.py` writes
its expected files, to be read and committed with it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.assets import k8s_tool
from tests.migrate.helpers import GOLDEN, Run

MANIFESTS = [
    f"{folder}/{p.name}"
    for folder in ("manifests", "versions", "leave-mapped")
    for p in sorted((GOLDEN / folder).iterdir())
]
"""manifests/: device-plugin requests; versions/: DRA objects written for resource.k8s.io before
v1 (kept apart: the control-plane suite applies manifests/ as rewritten, and some of these are
meant to stay unconvertible); leave-mapped/: `--leave-mapped` beside a class that maps
nvidia.com/gpu."""
ARGS = {
    "leave-mapped": (
        "--leave-mapped",
        "--cluster-file",
        str(GOLDEN / "leave-mapped.cluster.yaml"),
    )
}
"""The arguments a folder's cases run with."""
EXPECTED = GOLDEN / "expected"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def _expect(name: str, actual: str | None) -> None:
    """Compare with the expected file `name` (None: the file must not exist)."""
    path = EXPECTED / name
    if UPDATE:
        if actual is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(actual)
        return
    if actual is None:
        assert not path.exists(), f"{name} is expected, but nothing was produced"
        return
    assert path.exists(), f"no expected file {name}: run with UPDATE_GOLDEN=1 and review it"
    assert actual == path.read_text()


@pytest.mark.parametrize("case", MANIFESTS)
def test_a_golden_manifest_migrates_as_expected_and_a_second_run_changes_nothing(
    case: str, migrate: Callable[..., Run], workdir: Callable[..., Path]
) -> None:
    folder = workdir(case)
    name = Path(case).name
    original = (folder / name).read_text()
    args = ARGS.get(Path(case).parent.name, ())

    diff = migrate("--diff", *args, name)
    _expect(f"{name}.diff", diff.stdout or None)
    _expect(f"{name}.stderr", diff.stderr or None)
    failed = "migrate: not translated:" in diff.stderr  # warnings leave the exit code alone
    assert diff.code == (2 if failed else 1 if diff.stdout else 0)

    written = migrate("--write", *args, name)
    assert written.code == (2 if failed else 0)
    after = (folder / name).read_text()
    _expect(name, after if after != original else None)

    again = migrate("--diff", *args, name)
    assert again.stdout == ""
    assert again.code == (2 if failed else 0)
    assert (folder / name).read_text() == after


@pytest.mark.parametrize("name", ["overlay", "chart"])
def test_an_overlay_or_a_chart_gets_a_strategic_merge_patch_per_workload_and_is_not_rewritten(
    name: str, migrate: Callable[..., Run], workdir: Callable[..., Path]
) -> None:
    folder = workdir(f"sources/{name}")
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    tools = ["--kubectl", k8s_tool("kubectl"), "--helm", k8s_tool("helm")]
    target = "overlay/prod" if name == "overlay" else name

    run = migrate("--diff", *tools, target)
    assert (run.code, run.stderr) == (1, "")
    _expect(f"{name}.patch", run.stdout)

    written = migrate("--write", *tools, target)
    assert (written.code, written.stdout) == (0, run.stdout)
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
