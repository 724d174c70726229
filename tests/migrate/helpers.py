"""What the migrate tests share: the golden folder and the outcome of one run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
