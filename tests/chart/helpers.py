"""What the chart tests share: the chart, the release it is rendered as, and rendering it with
the real helm."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.assets import k8s_tool

Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "dra-webhook"
RELEASE, NAMESPACE = "rel", "dra-system"


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [k8s_tool("helm"), *args], check=False, capture_output=True, text=True, timeout=120
    )


@cache
def render(*args: str) -> tuple[Obj, ...]:
    """`helm template` of the chart as RELEASE in NAMESPACE with `args` (`-f values.yaml`,
    `--set k=v`): every document rendered, parsed."""
    result = run_helm("template", RELEASE, str(CHART), "-n", NAMESPACE, *args)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def of_kind(docs: tuple[Obj, ...], kind: str) -> list[Obj]:
    return [doc for doc in docs if doc["kind"] == kind]
