"""The engine interface: compile an expression once, evaluate the program many times.

Two backends implement it, picked by name by :func:`app.cel.factory.get_engine` (this module
imports neither):

- ``"cel-expr-python"`` (default): Google's CEL over cel-cpp. Type-checks with the Kubernetes
  types, evaluates in a few microseconds.
- ``"cel-python"``: pure Python (``celpy``), the fallback where the native wheel is unavailable.
  It has no type checker: type errors surface at evaluation, as :class:`CelEvalError`.

Both bind the same Kubernetes library (:mod:`app.cel.library`) and see the same device values
(:mod:`app.cel.device`); ``tests/cel/test_conformance.py`` runs one table on both.

Usage::

    engine = get_engine("cel-expr-python")  # from app.cel.factory
    program = engine.compile('device.driver == "gpu.nvidia.com"', SELECTOR)
    program.evaluate(engine.device_activation(device))  # -> True

Values going in are plain Python (the raw JSON of Kubernetes objects), plus
:class:`~app.k8s.quantity.Quantity` and :class:`~app.cel.semver.Semver`; values coming out are
the same kinds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from app.cel.device import Device

__all__ = [
    "ADMISSION",
    "ADMISSION_MESSAGE",
    "BACKENDS",
    "DEFAULT_BACKEND",
    "SELECTOR",
    "Engine",
    "Environment",
    "Program",
]

DEFAULT_BACKEND: Final = "cel-expr-python"
BACKENDS: Final = ("cel-expr-python", "cel-python")


@dataclass(frozen=True, slots=True)
class Environment:
    """What an expression may refer to and what it must evaluate to.

    ``result`` is ``"bool"`` or ``"string"`` (the program must produce that type, or ``dyn``
    whose value is checked at evaluation) or ``None`` for anything. ``device`` gives the
    variable ``device`` the Kubernetes DRA device type.
    """

    name: str
    variables: tuple[str, ...]
    result: str | None = "bool"
    device: bool = False


SELECTOR: Final = Environment("dra-selector", ("device",), "bool", device=True)
"""A DRA device selector (DeviceClass, ResourceClaim): ``device`` in, bool out."""

_ADMISSION_VARIABLES: Final = ("object", "oldObject", "request", "namespaceObject", "params")
ADMISSION: Final = Environment("admission", _ADMISSION_VARIABLES, "bool")
"""An admin rule, like a ValidatingAdmissionPolicy validation."""

ADMISSION_MESSAGE: Final = Environment("admission-message", _ADMISSION_VARIABLES, "string")
"""A rule's ``messageExpression``."""


class Program(ABC):
    """A compiled expression, safe to evaluate from many threads at once."""

    expression: str
    environment: Environment
    output_type: str
    cost: int = 1
    """Estimated cost of one evaluation (:func:`app.cel.cost.estimate`), set by the compile
    cache for device selectors; what a review's CEL budget is charged per evaluation."""

    @abstractmethod
    def evaluate(self, activation: Any) -> Any:
        """Evaluate against an activation from the same engine; raise ``CelEvalError``."""


class Engine(ABC):
    """A CEL backend with the Kubernetes library bound."""

    name: str
    checks_types: bool

    @abstractmethod
    def compile(self, expression: str, environment: Environment) -> Program:
        """Parse and check ``expression``; raise ``CelCompileError`` with the position."""

    @abstractmethod
    def activation(self, environment: Environment, variables: Mapping[str, Any]) -> Any:
        """Bind plain Python values to the environment's variables."""

    @abstractmethod
    def device_activation(self, device: Device) -> Any:
        """The activation of :data:`SELECTOR` for one device (build once, evaluate many)."""
