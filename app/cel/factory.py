"""Picks a CEL backend by name: the one module above both the engine interface and its backends.

`app.cel.engine` defines what a backend is and imports none; each backend imports the engine.
Only this module names the backends, so neither depends on the other (an import-graph test
fails on any cycle). A backend is imported when first asked for, so the one not configured is
never loaded (cel-python alone costs ~30 ms and a few MB at import).
"""

from __future__ import annotations

import threading

from app.cel.engine import BACKENDS, DEFAULT_BACKEND, Engine

_engines: dict[str, Engine] = {}
"""One engine per backend for the process: an engine holds no request state, only its
compiled environments, so sharing it is what makes the compile cache pay off."""
_engines_lock = threading.Lock()


def get_engine(name: str = DEFAULT_BACKEND) -> Engine:
    """The shared engine of a backend (``"cel-expr-python"`` or ``"cel-python"``)."""
    engine = _engines.get(name)
    if engine is not None:
        return engine
    with _engines_lock:
        engine = _engines.get(name)
        if engine is None:
            engine = _new_engine(name)
            _engines[name] = engine
    return engine


def _new_engine(name: str) -> Engine:
    if name == "cel-expr-python":
        from app.cel.backends.cel_expr import CelExprEngine

        return CelExprEngine()
    if name == "cel-python":
        from app.cel.backends.celpy_engine import CelPyEngine

        return CelPyEngine()
    raise ValueError(f"unknown CEL backend {name!r}; choose one of {', '.join(BACKENDS)}")
