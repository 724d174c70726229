"""Fixtures of the migrate tests: running the command as a user would, in a scratch folder."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.cli import main

GOLDEN = Path(__file__).parent / "golden"


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str


@pytest.fixture
def migrate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Run]:
    """`dra-webhook migrate ARGS...` run from `tmp_path`, so printed paths are relative."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> Run:
        capsys.readouterr()
        code = main(["migrate", *args])
        out = capsys.readouterr()
        return Run(code, out.out, out.err)

    return run


@pytest.fixture
def workdir(tmp_path: Path) -> Callable[..., Path]:
    """Copy golden inputs (files or folders under golden/) into the scratch folder."""

    def copy(*names: str) -> Path:
        for name in names:
            source = GOLDEN / name
            target = tmp_path / Path(name).name
            if source.is_dir():
                shutil.copytree(source, target)
            else:
                shutil.copyfile(source, target)
        return tmp_path

    return copy
