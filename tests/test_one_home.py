"""One rule, one home (docs/developing.md), where it was once broken.

- A request is decoded once, at the pipeline's edge (`app.policies.base.decode`), and never
  changed after: no `object.__setattr__` outside a constructor, no field of `Request` or `Body`
  left to be filled in later (`init=False`), no memo slot on them.
- Consumable capacity has one arithmetic (`app/allocation/capacity.py`) and capacity amounts one
  reader (`app.k8s.claims.capacity_requests`): no other module reads a request policy's fields,
  and the quota and ask modules read no quantity themselves.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.policies.base import Body, Request

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"

REQUEST_POLICY_FIELDS = ("requestPolicy", "validRange", "validValues")
ARITHMETIC_HOME = APP / "allocation" / "capacity.py"
NO_QUANTITY_READER = (
    APP / "k8s" / "capacity.py",
    APP / "policies" / "quota" / "capacity.py",
    APP / "policies" / "quota" / "shares.py",
)
"""Modules that count capacity: they take amounts read by the claim model."""


def _sources() -> list[Path]:
    return sorted(APP.rglob("*.py"))


def _setattr_outside_constructors(tree: ast.AST) -> list[int]:
    lines: list[int] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = child.name
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr == "__setattr__"
                and isinstance(child.func.value, ast.Name)
                and child.func.value.id == "object"
                and function not in ("__init__", "__post_init__")
            ):
                lines.append(child.lineno)
            visit(child, name)

    visit(tree, "")
    return lines


def test_no_frozen_value_is_changed_after_it_is_built() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in _sources()
        if (lines := _setattr_outside_constructors(ast.parse(path.read_text())))
    }
    assert not found, f"object.__setattr__ after construction (a memo on a frozen value): {found}"


def test_a_request_and_its_body_have_no_field_filled_in_later() -> None:
    for cls in (Request, Body):
        # a named tuple: every field is given to the constructor, none can be set after
        assert issubclass(cls, tuple) and cls._fields, cls.__name__
        assert vars(cls).get("__slots__") == (), f"{cls.__name__} instances have a __dict__"
        value = cls._make(None for _ in cls._fields)
        for name in cls._fields:
            with pytest.raises(AttributeError):
                setattr(value, name, None)


def _string_constants(tree: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is str}


def test_only_the_allocation_layer_reads_a_request_policy() -> None:
    readers = sorted(
        str(path.relative_to(ROOT))
        for path in _sources()
        if path != ARITHMETIC_HOME
        and _string_constants(ast.parse(path.read_text())) & set(REQUEST_POLICY_FIELDS)
    )
    assert not readers, f"a second reader of requestPolicy (use app.allocation.capacity): {readers}"


def test_the_modules_that_count_capacity_read_no_quantity_themselves() -> None:
    readers = sorted(
        str(path.relative_to(ROOT))
        for path in NO_QUANTITY_READER
        if {"parse_quantity", "quantity_or_none"}
        & {
            n.id if isinstance(n, ast.Name) else n.attr
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Name | ast.Attribute)
        }
    )
    assert not readers, f"a second reader of capacity amounts (use the claim model's): {readers}"
