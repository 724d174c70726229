"""The estimator: cel-go's `checker/cost.go` rules and Kubernetes' library costs, over the tree
of `tree.py` with the sizes of `sizes.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.cel.estimate.overloads import FIXED_K8S, resolve
from app.cel.estimate.sizes import (
    ACCU,
    CONST_COST,
    DEVICE_FIELDS,
    DYN,
    LIST_CREATE_COST,
    MAP_CREATE_COST,
    MAX_U64,
    ONE,
    REGEX_LENGTH,
    SCALARS,
    SELECT_COST,
    STRING_TRAVERSAL,
    UNKNOWN,
    ZERO,
    Range,
    Type,
    fixed,
    path_size,
    type_kind,
)
from app.cel.estimate.tree import Node, UnsupportedError, parse

# -- the estimator -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Local:
    path: tuple[str, ...] | None
    size: Range | None
    entry: _Entry | None
    type: Type


@dataclass(frozen=True, slots=True)
class _Entry:
    container: str  # "list" or "map"
    key: Range
    val: Range

    def union(self, other: _Entry | None) -> _Entry | None:
        if other is None:
            return None
        return _Entry(self.container, self.key.union(other.key), self.val.union(other.val))


class _Coster:
    def __init__(self) -> None:
        self.types: dict[int, Type] = {}
        self.paths: dict[int, tuple[str, ...]] = {}
        self.sizes: dict[int, Range] = {}
        self.entries: dict[int, _Entry] = {}
        self.locals: dict[str, list[_Local]] = {}

    # bookkeeping ------------------------------------------------------------------------------
    def type_of(self, e: Node) -> Type:
        return self.types.get(id(e), DYN)

    def local(self, name: str) -> _Local | None:
        stack = self.locals.get(name)
        return stack[-1] if stack else None

    def push(self, name: str, local: _Local) -> None:
        self.locals.setdefault(name, []).append(local)

    def pop(self, name: str) -> None:
        self.locals[name].pop()

    def path(self, e: Node) -> tuple[str, ...] | None:
        if e.kind == "ident":
            found = self.local(e.name)
            if found is not None:
                return found.path
        return self.paths.get(id(e))

    def size(self, e: Node) -> Range | None:
        """cel-go computeSize: computed, literal, estimator by path, scalar type, local."""
        found = self.sizes.get(id(e))
        if found is not None:
            return found
        if e.kind == "lit":
            return fixed(e.value_size)
        if e.kind in ("list", "map"):
            return fixed(len(e.args) if e.kind == "list" else len(e.args) // 2)
        path = self.path(e)
        if path and path[0] in (ACCU, "__result__"):
            path = None
        estimated = path_size(path)
        if estimated is not None:
            self.sizes[id(e)] = estimated
            return estimated
        if self.type_of(e) in SCALARS:
            return ONE
        if e.kind == "ident":
            found_local = self.local(e.name)
            if found_local is not None and found_local.size is not None:
                return found_local.size
        return None

    def size_or_unknown(self, e: Node) -> Range:
        return self.size(e) or UNKNOWN

    def entry(self, e: Node) -> _Entry | None:
        found = self.entries.get(id(e))
        if found is not None:
            return found
        if e.kind == "ident":
            local = self.local(e.name)
            if local is not None:
                return local.entry
        return None

    # the walk ---------------------------------------------------------------------------------
    def cost(self, e: Node) -> Range:
        if e.kind == "lit":
            self.types[id(e)] = e.value_type
            return fixed(CONST_COST)
        if e.kind == "ident":
            return self.cost_ident(e)
        if e.kind == "select":
            return self.cost_select(e)
        if e.kind == "call":
            return self.cost_call(e)
        if e.kind == "list":
            return self.cost_list(e)
        if e.kind == "map":
            return self.cost_map(e)
        if e.kind == "comp":
            return self.cost_bind(e) if e.is_bind else self.cost_comprehension(e)
        raise UnsupportedError(e.kind)

    def cost_ident(self, e: Node) -> Range:
        local = self.local(e.name)
        if local is not None:
            self.paths[id(e)] = local.path or ()
            self.types[id(e)] = local.type
        else:
            self.paths[id(e)] = (e.name,)
            self.types[id(e)] = "device" if e.name == "device" else DYN
        return fixed(SELECT_COST)

    def cost_select(self, e: Node) -> Range:
        operand = e.args[0]
        total = self.cost(operand)
        operand_type = self.type_of(operand)
        if operand_type == "device":
            self.types[id(e)] = DEVICE_FIELDS.get(e.name, DYN)
        elif type_kind(operand_type) == "map":
            self.types[id(e)] = operand_type[2]
        else:
            self.types[id(e)] = DYN
        if e.test_only:
            self.types[id(e)] = "bool"
            return total  # presence tests cost nothing in Kubernetes
        if operand_type == "device" or type_kind(operand_type) == "map":
            total = total.add(fixed(SELECT_COST))
        base = self.path(operand)
        self.paths[id(e)] = (*(base or ()), e.name)
        return total

    def cost_list(self, e: Node) -> Range:
        total = ZERO
        item = Range(MAX_U64, 0) if e.args else ZERO
        elem_types: list[Type] = []
        for element in e.args:
            total = total.add(self.cost(element))
            item = item.union(self.size_or_unknown(element))
            elem_types.append(self.type_of(element))
        self.entries[id(e)] = _Entry("list", ONE, item)
        elem = elem_types[0] if elem_types and all(t == elem_types[0] for t in elem_types) else DYN
        self.types[id(e)] = ("list", elem)
        return total.add(fixed(LIST_CREATE_COST))

    def cost_map(self, e: Node) -> Range:
        total = ZERO
        empty = not e.args
        key = ZERO if empty else Range(MAX_U64, 0)
        val = ZERO if empty else Range(MAX_U64, 0)
        key_types, val_types = [], []
        for k, v in zip(e.args[::2], e.args[1::2], strict=True):
            total = total.add(self.cost(k)).add(self.cost(v))
            key = key.union(self.size_or_unknown(k))
            val = val.union(self.size_or_unknown(v))
            key_types.append(self.type_of(k))
            val_types.append(self.type_of(v))
        self.entries[id(e)] = _Entry("map", key, val)
        kt = key_types[0] if key_types and all(t == key_types[0] for t in key_types) else DYN
        vt = val_types[0] if val_types and all(t == val_types[0] for t in val_types) else DYN
        self.types[id(e)] = ("map", kt, vt)
        return total.add(fixed(MAP_CREATE_COST))

    def _iter_types(self, range_type: Type) -> tuple[Type, Type, str]:
        kind = type_kind(range_type)
        if kind == "list":
            return "int", range_type[1], "list"
        if kind == "map":
            return range_type[1], range_type[2], "map"
        return DYN, DYN, "dyn"

    def cost_comprehension(self, e: Node) -> Range:
        assert e.accu_init is not None and e.cond is not None and e.step is not None
        assert e.result is not None
        iter_range = e.args[0]
        total = self.cost(iter_range).add(self.cost(e.accu_init))
        range_type = self.type_of(iter_range)
        key_type, value_type, container = self._iter_types(range_type)
        entry = self.entry(iter_range)
        if entry is not None:
            container = entry.container
        base = self.path(iter_range) or ()
        accu_type = self._accu_type(e, value_type if container == "list" else key_type)
        self.push(
            e.accu_var,
            _Local(
                self.path(e.accu_init), self.size(e.accu_init), self.entry(e.accu_init), accu_type
            ),
        )
        if e.iter_var2:
            key_path = "@indices" if container == "list" else "@keys"
            value_path = "@items" if container == "list" else "@values"
            self.push(
                e.iter_var,
                _Local((*base, key_path), entry.key if entry else None, None,
                       "int" if container == "list" else key_type),
            )  # fmt: skip
            self.push(
                e.iter_var2,
                _Local((*base, value_path), entry.val if entry else None, None, value_type),
            )
        elif container == "list":
            self.push(
                e.iter_var,
                _Local((*base, "@items"), entry.val if entry else None, None, value_type),
            )
        else:
            self.push(
                e.iter_var, _Local((*base, "@keys"), entry.key if entry else None, None, key_type)
            )
        loop = self.cost(e.cond)
        step = self.cost(e.step)
        # the accumulator's type after one step (a list built by map() has the transform's type)
        self.pop(e.iter_var)
        if e.iter_var2:
            self.pop(e.iter_var2)
        total = total.add(self.cost(e.result))
        self.pop(e.accu_var)
        count = self.size_or_unknown(iter_range)
        total = total.add(count.mul(step.add(loop)))
        self.types[id(e)] = self.type_of(e.result)
        if e.accu_init.kind == "lit":
            init_size = self.size(e.accu_init)
            if init_size is not None:
                self.sizes[id(e)] = init_size
        elif e.accu_init.kind in ("list", "map"):
            self.sizes[id(e)] = count
            step_entry = self.entry(e.step)
            if step_entry is not None:
                self.entries[id(e)] = step_entry
        return total

    def _accu_type(self, e: Node, element: Type) -> Type:
        init = e.accu_init
        assert init is not None
        if init.kind == "lit":
            return init.value_type
        if e.step is not None and e.step.kind == "call":
            # map/filter: the list's element type comes from the step's list literal
            step = e.step
            add = step.args[1] if step.name == "_?_:_" else step
            if add.kind == "call" and add.name == "_+_" and add.args[1].kind == "list":
                new = add.args[1].args[0]
                if new.kind == "ident" and new.name == e.iter_var:
                    return ("list", element)
                return ("list", DYN)
        return ("list", DYN)

    def cost_bind(self, e: Node) -> Range:
        assert e.accu_init is not None and e.result is not None
        total = self.cost(e.args[0]).add(self.cost(e.accu_init))
        init = e.accu_init
        self.push(
            e.accu_var,
            _Local(self.path(init), self.size(init), self.entry(init), self.type_of(init)),
        )
        total = total.add(self.cost(e.result))
        self.pop(e.accu_var)
        self.types[id(e)] = self.type_of(e.result)
        size = self.size(e.result)
        if size is not None:
            self.sizes[id(e)] = size
        entry = self.entry(e.result)
        if entry is not None:
            self.entries[id(e)] = entry
        return total

    def cost_call(self, e: Node) -> Range:
        if e.name == "dyn" and e.target is None and len(e.args) == 1:
            arg = e.args[0]
            cost = self.cost(arg)
            self.types[id(e)] = DYN
            size = self.size(arg)
            if size is not None:
                self.sizes[id(e)] = size
            entry = self.entry(arg)
            if entry is not None:
                self.entries[id(e)] = entry
            return ONE.add(cost)
        arg_costs = [self.cost(a) for a in e.args]
        total = ZERO
        target_type: Type = None
        if e.target is not None:
            total = total.add(self.cost(e.target))
            target_type = self.type_of(e.target)
        types = ([target_type] if e.target is not None else []) + [self.type_of(a) for a in e.args]
        overloads, result_type = resolve(e.name, e.target is not None, types)
        self.types[id(e)] = result_type
        fn = Range(MAX_U64, 0)
        result_size: Range | None = None
        for overload in overloads:
            cost, size = self.function_cost(e, overload, arg_costs)
            fn = fn.union(cost)
            if size is not None:
                result_size = size if result_size is None else result_size.union(size)
            if overload in ("index_list", "index_map") and e.args:
                entry = self.entry(e.args[0])
                result_size = entry.val if entry is not None else None
                step = "@items" if overload == "index_list" else "@values"
                self.paths[id(e)] = (*(self.path(e.args[0]) or ()), step)
            if result_size is None:
                result_size = self.size(e)
        if result_size is not None:
            self.sizes[id(e)] = result_size
        return total.add(fn)

    def function_cost(
        self, e: Node, overload: str, arg_costs: list[Range]
    ) -> tuple[Range, Range | None]:
        args_sum = ZERO
        for c in arg_costs:
            args_sum = args_sum.add(c)
        name = e.name
        target = e.target
        args = e.args
        k8s = self.kubernetes_cost(e)
        if k8s is not None:
            cost, size = k8s
            return cost.add(args_sum), size
        if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
            return self.size_or_unknown(args[0]).factor(STRING_TRAVERSAL).add(args_sum), None
        if overload == "in_list" and len(args) == 2:
            return self.size_or_unknown(args[1]).factor(1).add(args_sum), None
        if overload in ("matches_string", "matches"):
            subject, pattern = (target, args[0]) if target is not None else (args[0], args[1])
            if subject is None:
                return ONE.add(args_sum), None
            string_cost = self.size_or_unknown(subject).add(ONE).factor(STRING_TRAVERSAL)
            regex_cost = self.size_or_unknown(pattern).factor(REGEX_LENGTH)
            return string_cost.mul(regex_cost).add(args_sum), None
        if overload == "contains_string" and target is not None and len(args) == 1:
            string_cost = self.size_or_unknown(target).factor(STRING_TRAVERSAL)
            sub_cost = self.size_or_unknown(args[0]).factor(STRING_TRAVERSAL)
            return string_cost.mul(sub_cost).add(args_sum), None
        if name in ("_&&_", "_||_"):
            lhs, rhs = arg_costs
            return Range(lhs.lo, lhs.add(rhs).hi), None
        if name == "_?_:_":
            size = self.size_or_unknown(args[1]).union(self.size_or_unknown(args[2]))
            left, right = self.entry(args[1]), self.entry(args[2])
            if left is not None:
                joined = left.union(right)
                if joined is not None:
                    self.entries[id(e)] = joined
            return arg_costs[0].add(arg_costs[1].union(arg_costs[2])), size
        if overload in ("string_to_bytes", "bytes_to_string") and len(args) == 1:
            sz = self.size_or_unknown(args[0])
            cost = sz.factor(STRING_TRAVERSAL).add(args_sum)
            if overload == "string_to_bytes":
                return cost, Range(sz.lo, min(sz.hi * 4, MAX_U64))
            return cost, Range(sz.lo // 4, sz.hi)
        if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
            result = self.size_or_unknown(args[0]).add(self.size_or_unknown(args[1]))
            left, right = self.entry(args[0]), self.entry(args[1])
            if left is not None:
                joined = left.union(right)
                if joined is not None:
                    self.entries[id(e)] = joined
            if overload == "add_list":
                return ONE.add(args_sum), result
            return result.factor(STRING_TRAVERSAL).add(args_sum), result
        if name in ("_==_", "_!=_") or (
            name in ("_<_", "_<=_", "_>_", "_>=_") and overload.endswith(("_string", "_bytes"))
        ):
            lhs, rhs = self.size_or_unknown(args[0]), self.size_or_unknown(args[1])
            smallest = min(lhs.hi, rhs.hi)
            return Range(1 if smallest > 0 else 0, smallest).factor(STRING_TRAVERSAL).add(
                args_sum
            ), None
        return ONE.add(args_sum), None

    def kubernetes_cost(self, e: Node) -> tuple[Range, Range | None] | None:
        """k8s.io/apiserver/pkg/cel/library CostEstimator.EstimateCallCost (the DRA subset)."""
        name, target, args = e.name, e.target, e.args
        if name in FIXED_K8S:
            return ONE, None
        if name in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf") and target:
            target_type = self.type_of(target)
            if type_kind(target_type) == "list" or target_type == DYN:
                element_cost = ONE
                elem_type = target_type[1] if isinstance(target_type, tuple) else DYN
                if elem_type in ("string", "bytes"):
                    base = self.path(target)
                    elem_size = path_size((*base, "@items") if base else None) or UNKNOWN
                    element_cost = element_cost.add(elem_size.factor(STRING_TRAVERSAL))
                return self.size_or_unknown(target).mul(element_cost), None
            return self.size_or_unknown(target).factor(STRING_TRAVERSAL), None
        if name in ("lowerAscii", "upperAscii", "substring", "trim") and target:
            size = self.size_or_unknown(target)
            return size.factor(STRING_TRAVERSAL), size
        if name == "replace" and target and len(args) >= 2:
            return self._replace(target, args)
        if name == "split" and target:
            size = self.size_or_unknown(target)
            return size.factor(2 * STRING_TRAVERSAL), Range(0, size.hi)
        if name == "join" and target:
            list_size = self.size_or_unknown(target)
            target_type = self.type_of(target)
            size = ZERO
            if isinstance(target_type, tuple):
                base = self.path(target)
                elem = path_size((*base, "@items") if base else None) or UNKNOWN
                size = list_size.mul(elem)
            if args:
                sep = self.size_or_unknown(args[0])
                separators = Range(max(list_size.lo - 1, 0), max(list_size.hi - 1, 0))
                size = size.add(sep.mul(separators))
            return size.factor(STRING_TRAVERSAL), size
        if name in ("find", "findAll") and target and args:
            size = self.size_or_unknown(target)
            string_cost = size.add(ONE).factor(STRING_TRAVERSAL)
            regex_cost = self.size_or_unknown(args[0]).factor(REGEX_LENGTH)
            return string_cost.mul(regex_cost), Range(0, size.hi)
        if name in ("quantity", "isQuantity", "semver", "isSemver") and target and args:
            return self.size_or_unknown(args[0]).factor(STRING_TRAVERSAL), None
        if name == "_==_" and len(args) == 2:
            lhs, rhs = self.type_of(args[0]), self.type_of(args[1])
            if lhs == rhs and lhs in ("quantity", "semver"):
                return ONE, None
        if name in ("format", "quote", "charAt", "reverse") or name.startswith("sets."):
            return None
        return None

    def _replace(self, target: Node, args: list[Node]) -> tuple[Range, Range | None]:
        size = self.size_or_unknown(target)
        old = self.size_or_unknown(args[0])
        new = self.size_or_unknown(args[1])
        if old.lo == 0:
            count_hi = size.hi + 1 if size.hi < MAX_U64 else size.hi
            retained_hi = size.hi
        elif new.hi <= old.lo:
            count_hi, retained_hi = 0, size.hi
        else:
            count_hi, retained_hi = math.ceil(size.hi / old.lo), 0
        if old.hi == 0:
            count_lo = size.lo + 1 if size.lo < MAX_U64 else size.lo
            retained_lo = size.lo
        elif old.hi <= new.lo:
            count_lo, retained_lo = 0, size.lo
        else:
            count_lo, retained_lo = math.ceil(size.lo / old.hi), 0
        result = Range(count_lo, count_hi).mul(new).add(Range(retained_lo, retained_hi))
        return size.factor(2 * STRING_TRAVERSAL), result


def estimate_cost(expression: str) -> int:
    """The maximum of cel-go's cost estimate for ``expression`` as a DRA selector.

    Raises :class:`UnsupportedError` for syntax this model cannot parse.
    """
    tree = parse(expression)
    return _Coster().cost(tree).hi
