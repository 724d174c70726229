"""What one quota check found: violations (deny) and warnings (warn), and the answer; how a
count of devices is worded in it."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.policies.base import ALLOW, Result, Violation
from app.policies.quota.rules import Breach, CapacityBreach


@dataclass
class Findings:
    """Violations (deny) and warnings (warn) collected while checking one object."""

    violations: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(self, path: str, message: str, breach: Breach | CapacityBreach) -> None:
        text = f"{message} (quota {breach.entry})" if breach.entry else message
        if breach.deny:
            self.violations.append(Violation(path, text))
        else:
            self.warnings.append(f"{path}: {text}; allowed (warn only)" if path else text)

    def result(self, what: str, namespace: str) -> Result:
        if not self.violations and not self.warnings:
            return ALLOW
        return Result(
            violations=tuple(self.violations),
            warnings=tuple(self.warnings),
            summary=f"{what} is over the DRA device quota of namespace {namespace}:",
        )


def devices(amount: int, device_class: str) -> str:
    """`4 devices of gpu.nvidia.com`."""
    return f"{amount} device{'' if amount == 1 else 's'} of {device_class or '(no class)'}"
