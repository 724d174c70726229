"""Declared dependencies and the lock: what app/ imports is declared, and what is declared is
pinned with hashes in requirements.txt (the image) and requirements-dev.txt (CI), alike."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def _pins(lock: str) -> dict[str, set[str]]:
    pins: dict[str, set[str]] = {}
    for name, version in _PIN.findall((ROOT / lock).read_text()):
        pins.setdefault(_name(name), set()).add(version)
    return pins


def _imported_top_level_modules() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "app").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"app", "__future__"}


def test_every_distribution_the_app_imports_is_declared() -> None:
    declared = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    providers = packages_distributions()
    undeclared = {
        module: providers.get(module)
        for module in _imported_top_level_modules()
        if not {_name(d) for d in providers.get(module, [])} & declared
    }
    assert undeclared == {}


def test_every_declared_dependency_is_pinned_with_hashes_in_the_lock() -> None:
    text = (ROOT / "requirements.txt").read_text()
    pins = _pins("requirements.txt")
    for requirement in PYPROJECT["project"]["dependencies"]:
        assert _name(requirement) in pins, f"{requirement} is not in requirements.txt: make lock"
    blocks = [b for b in re.split(r"\n(?=[A-Za-z0-9])", text) if _PIN.match(b)]
    assert blocks and all("--hash=sha256:" in block for block in blocks)


def test_the_dev_lock_pins_the_runtime_dependencies_at_the_same_versions() -> None:
    runtime, dev = _pins("requirements.txt"), _pins("requirements-dev.txt")
    assert {name: dev.get(name) for name in runtime} == runtime
    for requirement in PYPROJECT["project"]["optional-dependencies"]["dev"]:
        assert _name(requirement) in dev, f"{requirement} is not in requirements-dev.txt"
