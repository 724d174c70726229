"""The worst-case cost of a DRA selector, as the Kubernetes API server estimates it.

`resource.k8s.io` validation compiles a selector with cel-go in an environment that declares one
variable, ``device``, and asks cel-go's static estimator (``checker.Cost``) for the most one
evaluation can cost; above 1,000,000 the selector is refused ("too complex, exceeds cost
limit"). This module walks the same tree with the same rules, so both verdicts agree:

- **the tree** is celpy's Lark parse, rewritten into cel-go's shape: operators become calls
  (``_==_``, ``_[_]``, ``@in``, ...), and the macros expand as cel-go's parser expands them
  (``all``/``exists``/``exists_one``/``map``/``filter`` into comprehensions over an accumulator
  ``@result``, ``has()`` into a presence test, ``cel.bind`` into a comprehension over ``[]``);
- **the types** are those the checker gives: ``device`` is a struct with ``driver`` (string),
  ``allowMultipleAllocations`` (bool), ``attributes`` (map of maps of any value) and
  ``capacity`` (map of maps of Quantity); an attribute value is dynamic, so a call on it
  resolves to every overload its other arguments allow, and its cost is their union;
- **the sizes** come from the DRA size estimator (``dynamic-resource-allocation/cel``): each
  map holds at most 32 entries (ResourceSliceMaxAttributesAndCapacitiesPerDevice), a domain is
  at most 63 characters, an attribute name 32, a driver name 63, an attribute value 64; sizes
  follow field paths (``device.attributes[d].x`` is ``device/attributes/@values/x``) and flow
  through literals, concatenations, comprehensions and bindings as cel-go's do;
- **the costs** are cel-go's (``checker/cost.go``: 1 per identifier or selection of a map or
  struct field, 0 per constant, 10 per list and 30 per map created, 1 per call, a tenth of a
  string's length per traversal, a quarter of a pattern's length per regex step, comprehension
  cost = range size x (step + condition), ``&&``/``||`` the sum of both sides) and Kubernetes'
  (``apiserver/pkg/cel/library/cost.go``: Quantity, Semver and list functions, string
  extension functions, O(1) equality of Quantities and Semvers).

``presence tests cost 0`` as in Kubernetes' base environment (``PresenceTestHasCost(false)``).
What the model does not know (a function outside the DRA environment, syntax celpy cannot
parse) falls back to a bound that is never lower than cel-go's: :func:`estimate` then returns
the unknown cost, and the selector is refused.

The model is split by concern: `sizes.py` (saturating ranges, the checker's types, the DRA size
estimator), `tree.py` (the parse in cel-go's shape), `overloads.py` (which overloads a call
resolves to), `coster.py` (the cost rules).
"""

from app.cel.estimate.coster import estimate_cost
from app.cel.estimate.sizes import MAX_U64
from app.cel.estimate.tree import Node, UnsupportedError, parse

__all__ = ["MAX_U64", "Node", "UnsupportedError", "estimate_cost", "parse"]
