"""Errors of the CEL layer.

::

    CelError (ValueError)
    ├── CelCompileError   the expression does not parse or type-check; carries the position
    └── CelEvalError      evaluation failed (unknown attribute, no such overload, bad quantity)

Both are *about the expression*, never about the webhook: callers turn them into denials,
warnings or "this device does not match", never into HTTP 500s.
"""

from __future__ import annotations

__all__ = ["CelCompileError", "CelError", "CelEvalError", "does_not_compile"]


class CelError(ValueError):
    """Base class: something is wrong with a CEL expression or its evaluation."""


class CelCompileError(CelError):
    """The expression does not compile.

    ``line`` and ``column`` are 1-based and ``offset`` is the 0-based character offset into
    ``expression``; all three are ``None`` when the backend does not say where.
    """

    def __init__(
        self,
        expression: str,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.expression = expression
        self.message = message
        self.line = line
        self.column = column
        self.offset = offset
        where = f"{line}:{column}: " if line is not None and column is not None else ""
        super().__init__(f"{where}{message}")

    def snippet(self) -> str:
        """The offending line with a caret under the column, as CEL tools print it."""
        if self.line is None or self.column is None:
            return self.expression
        text = self.expression.splitlines()[self.line - 1] if self.expression else ""
        return f"{text}\n{'.' * (self.column - 1)}^"


def does_not_compile(error: CelCompileError, expression: str) -> str:
    """The one wording of a compile error in denials and startup errors:
    ``does not compile at 1:8: <message>: '<expression>'`` (no position when the backend gives
    none)."""
    where = f" at {error.line}:{error.column}" if error.line is not None else ""
    return f"does not compile{where}: {error.message}: {expression!r}"


class CelEvalError(CelError):
    """Evaluation failed; ``message`` is the backend's reason."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)
