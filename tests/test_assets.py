"""Other projects' files the tests read from DRA_WEBHOOK_TEST_DATA (tests/assets.py): a skip in
one line saying what to set, a failure under CI=true, and no copy of them in the repository."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.assets import (
    HOW_TO_GET_TEST_DATA,
    REPO,
    TEST_DATA_FOLDERS,
    TEST_DATA_VARIABLE,
    WITHOUT_TEST_DATA,
    missing,
    third_party,
    third_party_names,
)

SMALL = 400
"""Files this small (an empty __init__.py, a one-line license header) may match by chance."""


@pytest.fixture
def no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


@pytest.mark.usefixtures("no_ci")
def test_without_the_variable_a_test_skips_in_one_line_naming_it_and_every_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TEST_DATA_VARIABLE, raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        third_party("operators")
    reason = str(skipped.value)
    assert reason == HOW_TO_GET_TEST_DATA
    assert "\n" not in reason
    assert TEST_DATA_VARIABLE in reason
    assert all(f"{name}/" in reason for name in TEST_DATA_FOLDERS)
    assert "outside the repository" in reason


def test_under_ci_a_missing_folder_fails_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TEST_DATA_VARIABLE, raising=False)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=TEST_DATA_VARIABLE):
        third_party("dra-versions")


@pytest.mark.usefixtures("no_ci")
def test_a_folder_without_the_subfolder_is_named_with_what_it_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TEST_DATA_VARIABLE, str(tmp_path))
    with pytest.raises(pytest.skip.Exception) as skipped:
        third_party("real-manifests")
    assert str(skipped.value).startswith(
        f"{TEST_DATA_VARIABLE}={tmp_path} has no real-manifests/: "
    )


def test_a_relative_folder_is_taken_from_the_repository_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "crds").mkdir()
    monkeypatch.setenv(TEST_DATA_VARIABLE, os.path.relpath(tmp_path, REPO))
    monkeypatch.chdir(tmp_path)  # tests that run the CLI move elsewhere: it must not matter
    assert third_party("crds").resolve() == (tmp_path / "crds").resolve()


def test_parameters_are_the_file_names_or_one_case_that_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "dra-versions").mkdir()
    for name in ("b.yaml", "a.yaml", "README.md"):
        (tmp_path / "dra-versions" / name).write_text("x")
    monkeypatch.setenv(TEST_DATA_VARIABLE, str(tmp_path))
    assert third_party_names("dra-versions", "*.yaml") == ["a.yaml", "b.yaml"]
    assert third_party_names("dra-versions", "*.json") == [WITHOUT_TEST_DATA]
    monkeypatch.delenv(TEST_DATA_VARIABLE)
    assert third_party_names("dra-versions") == [WITHOUT_TEST_DATA]


def _sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes(), usedforsecurity=False).hexdigest()


def test_the_repository_holds_no_copy_of_a_test_data_file() -> None:
    data = third_party(".")
    theirs = {
        _sha1(path): str(path.relative_to(data))
        for path in sorted(data.rglob("*"))
        if path.is_file() and path.stat().st_size > SMALL
    }
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False, timeout=60
    )
    if listed.returncode != 0:
        missing(f"git ls-files failed in {REPO}: not a git checkout")
    ours = [REPO / name for name in listed.stdout.decode().split("\0") if name]
    copies = {
        str(path.relative_to(REPO)): theirs[digest]
        for path in ours
        if path.is_file() and path.stat().st_size > SMALL and (digest := _sha1(path)) in theirs
    }
    assert copies == {}, "other projects' files: keep them in the test data folder"
