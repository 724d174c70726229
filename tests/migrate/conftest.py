"""Fixtures of the migrate tests: golden inputs copied into a scratch folder (the `migrate`
fixture itself is in tests/conftest.py: the workload tests use it too)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.migrate.helpers import GOLDEN


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
