"""A pure model of kube-scheduler's DRA allocator: never / not now / ok, with the nearest miss.

- :mod:`~app.allocation.inventory`: devices per node in the scheduler's order, over the
  cluster's Nodes (:mod:`~app.allocation.nodes`: which nodes a slice's selection reaches), from
  what is read of each slice (:mod:`~app.allocation.slices`) gathered into pools node by node
  (:mod:`~app.allocation.pools`: ``GatherPools``, incomplete and invalid pools);
- :mod:`~app.allocation.state`: what allocated claims hold, consumable capacity arithmetic;
- :mod:`~app.allocation.plans`: what the search is asked (a pod's claims as plans), the device
  limit of a claim, and the errors that fail the whole pod;
- :mod:`~app.allocation.search`: the search on one node (``allocateOne``, ``allocateDevice``),
  with :mod:`~app.allocation.constraints` and :mod:`~app.allocation.counters` (shared counters),
  run node by node by :mod:`~app.allocation.attempt` (the first error fails the pod);
- :mod:`~app.allocation.explain`: the nearest miss, worded per verdict by
  :mod:`~app.allocation.never` (on no node, even with every device free) and
  :mod:`~app.allocation.not_now` (what other claims hold);
- :mod:`~app.allocation.model`: the entry point, memoized by claim shape and generations.

It reads the device index (:mod:`app.devices.index`) and the cluster view's plain data, and knows
nothing of admission: ``policies/satisfiability.py`` turns its verdict into warnings or denials.
"""

from app.allocation.claim_input import ClaimInput, shaped
from app.allocation.explain import Problem
from app.allocation.model import NEVER, NOT_NOW, OK, UNCHECKED, Model, Verdict
from app.allocation.plans import ALLOCATION_RESULTS_MAX_SIZE
from app.allocation.state import Allocations

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "NEVER",
    "NOT_NOW",
    "OK",
    "UNCHECKED",
    "Allocations",
    "ClaimInput",
    "Model",
    "Problem",
    "Verdict",
    "shaped",
]
