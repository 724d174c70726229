"""The tree the cost model walks: celpy's Lark parse rewritten into cel-go's shape.

Operators become calls (`_==_`, `_[_]`, `@in`, ...) and the macros expand as cel-go's parser
expands them (comprehensions over `@result`, `has()` as a presence test, `cel.bind`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Final

from app.cel.estimate.sizes import ACCU, Type

# -- the tree ----------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Node:
    """One expression in cel-go's shape."""

    kind: str  # lit, ident, select, call, list, map, struct, comp
    name: str = ""  # ident name, field name, function name
    args: list[Node] = field(default_factory=list)
    target: Node | None = None
    value_type: Type = None  # literal type
    value_size: int = 0  # literal size
    test_only: bool = False
    # comprehension parts
    iter_var: str = ""
    iter_var2: str = ""
    accu_var: str = ""
    accu_init: Node | None = None
    cond: Node | None = None
    step: Node | None = None
    result: Node | None = None
    is_bind: bool = False


class UnsupportedError(Exception):
    """Syntax or a function the model cannot cost exactly."""


def _lit(value_type: Type, size: int) -> Node:
    return Node("lit", value_type=value_type, value_size=size)


def _ident(name: str) -> Node:
    return Node("ident", name=name)


def _call(name: str, *args: Node, target: Node | None = None) -> Node:
    return Node("call", name=name, args=list(args), target=target)


@functools.cache
def _lark_parser() -> Any:
    from celpy.celparser import CELParser

    return CELParser()


def parse(expression: str) -> Node:
    """celpy's Lark tree of ``expression`` in cel-go's shape; raises :class:`UnsupportedError`."""
    try:
        tree = _lark_parser().parse(expression)
    except Exception as error:  # celpy raises its own parse errors
        raise UnsupportedError(f"not parsed: {error}") from None
    return _Builder().expr(tree)


_RELATIONS: Final = {
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_in": "@in",
    "addition_add": "_+_",
    "addition_sub": "_-_",
    "multiplication_mul": "_*_",
    "multiplication_div": "_/_",
    "multiplication_mod": "_%_",
}
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})


class _Builder:
    def expr(self, tree: Any) -> Node:
        """Rewrite one node of celpy's Lark tree (its `data` names the grammar rule)."""
        method = getattr(self, "_" + str(tree.data), None)
        if method is None:
            raise UnsupportedError(f"syntax {tree.data}")
        node: Node = method(tree.children)
        return node

    def _expr(self, children: list[Any]) -> Node:
        if len(children) == 1 or children[1] is None:
            return self.expr(children[0])
        return _call("_?_:_", *(self.expr(c) for c in children))

    def _binary(self, children: list[Any], op: str) -> Node:
        if len(children) == 1 or children[0] is None:
            return self.expr(children[-1])
        return _call(op, self.expr(children[0]), self.expr(children[1]))

    def _conditionalor(self, children: list[Any]) -> Node:
        return self._binary(children, "_||_")

    def _conditionaland(self, children: list[Any]) -> Node:
        return self._binary(children, "_&&_")

    def _operator(self, children: list[Any]) -> Node:
        if len(children) == 1 or children[0] is None:
            return self.expr(children[-1])
        left = children[0]
        return _call(
            _RELATIONS[str(left.data)], self.expr(left.children[0]), self.expr(children[1])
        )

    _relation = _operator
    _addition = _operator
    _multiplication = _operator

    def _unary(self, children: list[Any]) -> Node:
        if len(children) == 1:
            return self.expr(children[0])
        op = "!_" if children[0].data == "unary_not" else "-_"
        return _call(op, self.expr(children[1]))

    def _member(self, children: list[Any]) -> Node:
        return self.expr(children[0])

    def _primary(self, children: list[Any]) -> Node:
        return self.expr(children[0])

    def _paren_expr(self, children: list[Any]) -> Node:
        return self.expr(children[0])

    def _member_dot(self, children: list[Any]) -> Node:
        return Node("select", name=str(children[1]), args=[self.expr(children[0])])

    def _exprlist(self, tree: Any) -> list[Node]:
        if tree is None:
            return []
        return [self.expr(c) for c in tree.children]

    def _member_dot_arg(self, children: list[Any]) -> Node:
        target_tree, name = children[0], str(children[1])
        args = self._exprlist(children[2] if len(children) > 2 else None)
        if name in _MACROS and args and args[0].kind == "ident" and len(args) in (2, 3):
            return _comprehension(name, self.expr(target_tree), args)
        target = self.expr(target_tree)
        if name == "bind" and target.kind == "ident" and target.name == "cel" and len(args) == 3:
            if args[0].kind != "ident":
                raise UnsupportedError("cel.bind needs a name")
            return Node(
                "comp",
                args=[Node("list")],
                iter_var="#unused",
                accu_var=args[0].name,
                accu_init=args[1],
                cond=_lit("bool", 1),
                step=_ident(args[0].name),
                result=args[2],
                is_bind=True,
            )
        return _call(name, *args, target=target)

    def _member_index(self, children: list[Any]) -> Node:
        return _call("_[_]", self.expr(children[0]), self.expr(children[1]))

    def _member_object(self, children: list[Any]) -> Node:
        raise UnsupportedError("message construction")

    def _ident_arg(self, children: list[Any]) -> Node:
        name = str(children[0])
        args = self._exprlist(children[1] if len(children) > 1 else None)
        if name == "has" and len(args) == 1 and args[0].kind == "select":
            presence = args[0]
            return Node("select", name=presence.name, args=presence.args, test_only=True)
        return _call(name, *args)

    def _dot_ident_arg(self, children: list[Any]) -> Node:
        return self._ident_arg(children)

    def _ident(self, children: list[Any]) -> Node:
        return _ident(str(children[0]))

    def _dot_ident(self, children: list[Any]) -> Node:
        return _ident(str(children[0]))

    def _list_lit(self, children: list[Any]) -> Node:
        return Node("list", args=self._exprlist(children[0] if children else None))

    def _map_lit(self, children: list[Any]) -> Node:
        items = self._exprlist(children[0] if children else None)
        return Node("map", args=items)

    _mapinits = _exprlist

    def _literal(self, children: list[Any]) -> Node:
        token = children[0]
        kind, text = token.type, str(token)
        if kind in ("STRING_LIT", "MLSTRING_LIT"):
            return _lit("string", len(_string_value(text)))
        if kind == "BYTES_LIT":
            return _lit("bytes", len(_string_value(text[1:]).encode("utf-8", "surrogatepass")))
        if kind == "BOOL_LIT":
            return _lit("bool", 1)
        if kind == "NULL_LIT":
            return _lit("null", 1)
        if kind == "UINT_LIT":
            return _lit("uint", 1)
        if kind == "FLOAT_LIT":
            return _lit("double", 1)
        return _lit("int", 1)


def _comprehension(macro: str, target: Node, args: list[Node]) -> Node:
    """cel-go's parser expansion of a macro (parser/macro.go)."""
    var = args[0].name
    accu = _ident(ACCU)
    comp = Node("comp", args=[target], iter_var=var, accu_var=ACCU, result=_ident(ACCU))
    if len(args) == 3 and macro in ("all", "exists", "exists_one"):
        # the two-variable forms: all(k, v, p)
        if args[1].kind != "ident":
            raise UnsupportedError("two-variable comprehension needs names")
        comp.iter_var2 = args[1].name
        args = [args[0], args[2]]
    if macro == "all":
        comp.accu_init = _lit("bool", 1)
        comp.cond = _call("@not_strictly_false", accu)
        comp.step = _call("_&&_", _ident(ACCU), args[1])
    elif macro == "exists":
        comp.accu_init = _lit("bool", 1)
        comp.cond = _call("@not_strictly_false", _call("!_", accu))
        comp.step = _call("_||_", _ident(ACCU), args[1])
    elif macro == "exists_one":
        comp.accu_init = _lit("int", 1)
        comp.cond = _lit("bool", 1)
        comp.step = _call(
            "_?_:_", args[1], _call("_+_", _ident(ACCU), _lit("int", 1)), _ident(ACCU)
        )
        comp.result = _call("_==_", accu, _lit("int", 1))
    elif macro == "map":
        comp.accu_init = Node("list")
        comp.cond = _lit("bool", 1)
        transform = args[-1]
        step = _call("_+_", _ident(ACCU), Node("list", args=[transform]))
        if len(args) == 3:
            step = _call("_?_:_", args[1], step, _ident(ACCU))
        comp.step = step
    else:  # filter
        comp.accu_init = Node("list")
        comp.cond = _lit("bool", 1)
        step = _call("_+_", _ident(ACCU), Node("list", args=[_ident(var)]))
        comp.step = _call("_?_:_", args[1], step, _ident(ACCU))
    return comp


_SIMPLE_ESCAPES: Final = frozenset("abfnrtv\"'\\`?")


def _string_value(text: str) -> str:
    """The value of a CEL string literal (only its length matters here)."""
    raw = text[:1] in ("r", "R")
    if raw:
        text = text[1:]
    quote = text[:3] if text[:3] in ('"""', "'''") else text[:1]
    body = text[len(quote) : len(text) - len(quote)]
    if raw or "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 >= len(body):
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in "xX":
            out.append(chr(int(body[i + 2 : i + 4], 16)))
            i += 4
        elif nxt == "u":
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        elif nxt == "U":
            out.append(chr(int(body[i + 2 : i + 10], 16)))
            i += 10
        elif nxt in "0123":
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(nxt if nxt not in _SIMPLE_ESCAPES else "?")
            i += 2
    return "".join(out)
