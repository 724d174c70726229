"""What the chart tests share: the chart, the release it is rendered as, and rendering it with
the real helm."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from app.cel.engine import ADMISSION, ADMISSION_MESSAGE
from app.cel.factory import get_engine
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


def inline_variables(policy: Obj, expression: str) -> str:
    """`expression` of a ValidatingAdmissionPolicy with every `variables.<name>` replaced by that
    variable's expression (the project's engine has no `variables`; a variable only reads those
    declared before it). A `legacy*` variable is a literal and goes in as it is (cel-python's
    function check reads `in (` as a call)."""
    known = {
        v["name"]: v["expression"] if v["name"].startswith("legacy") else f"({v['expression']})"
        for v in policy["spec"]["variables"]
    }
    pattern = re.compile(r"\bvariables\.(\w+)")
    while pattern.search(expression):
        expression = pattern.sub(lambda m: known[m.group(1)], expression)
    return expression


@cache
def compile_admission(expression: str, backend: str, message: bool = False) -> Callable[[Obj], Any]:
    """An admission policy's expression (or, with `message`, its messageExpression) compiled by
    this project's engine, evaluated over `object`, `oldObject`, `request`, `namespaceObject`."""
    engine = get_engine(backend)
    environment = ADMISSION_MESSAGE if message else ADMISSION
    program = engine.compile(expression, environment)

    def evaluate(variables: Obj) -> Any:
        return program.evaluate(engine.activation(environment, {**variables, "params": None}))

    return evaluate


def dra_only_policy(*args: str) -> Obj:
    """The chart's `-dra-only` ValidatingAdmissionPolicy as rendered with `args`."""
    (found,) = [
        d
        for d in render(*args)
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"].endswith("-dra-only")
    ]
    return found


def pod_verdict(pod: Obj, namespace: str, mode: str, backend: str, *args: str) -> tuple[bool, str]:
    """(allowed, message) of the `-dra-only` admission policy (rendered with `args`) for `pod`
    created in `namespace` labelled `gpu-mode=<mode>`."""
    policy = dra_only_policy(*args)
    variables = {
        "object": pod,
        "oldObject": None,
        "request": {
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": namespace,
            "operation": "CREATE",
        },
        "namespaceObject": {"metadata": {"name": namespace, "labels": {"gpu-mode": mode}}},
    }
    (validation,) = policy["spec"]["validations"]
    if compile_admission(inline_variables(policy, validation["expression"]), backend)(variables):
        return True, ""
    text = compile_admission(
        inline_variables(policy, validation["messageExpression"]), backend, True
    )(variables)
    return False, str(text)
