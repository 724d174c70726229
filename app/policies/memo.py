"""A bounded memo of answers by request shape, for checks whose answer is a pure function of it.

Its own module, importing nothing of the policies, so that `Compiled` can hold one per Pipeline
without an import cycle through the policy modules (tests/test_import_cycles.py).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T")

MEMO_LIMIT = 4096
"""Distinct shapes remembered; shapes come from users, so the memo is bounded (then cleared)."""


class ShapeMemo(Generic[T]):
    """Answer by request shape. One per Pipeline (in Compiled): the policy it was built from is
    part of every answer."""

    def __init__(self, limit: int = MEMO_LIMIT) -> None:
        self._answers: dict[Hashable, T] = {}
        self._limit = limit

    def get(self, key: Hashable) -> T | None:
        return self._answers.get(key)

    def put(self, key: Hashable, answer: T) -> T:
        if len(self._answers) >= self._limit:
            self._answers.clear()
        self._answers[key] = answer
        return answer
