"""A claim as the allocation model reads it (`ClaimInput`), and the shape its verdict memo keys
it by: worked out ahead for a claim judged many times (`shaped`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.k8s.claims import ClaimSpec


@dataclass(frozen=True, slots=True)
class ClaimInput:
    label: str
    """How messages name the claim: "claim ns/name", "claim gpu (template t)"."""
    spec: ClaimSpec
    prefix: str = ""
    """Put before the claim's field paths (a pod's ``spec.resourceClaims[0]`` -> ...)."""
    counters_back: bool = False
    """The release's allocator gives a refused device's counters back (ClaimPlan)."""
    shape: ShapeKey | None = field(default=None, compare=False, repr=False)
    """What the verdict memo keys the claim by, when worked out ahead (`shaped`): a claim
    judged again and again (translation's, from its memo) is not read again each time."""


@dataclass(frozen=True, slots=True, eq=False)
class ShapeKey:
    """A claim's shape (`_claim_shape`) with its hash worked out once: the verdict memo's key
    of a kept claim is then hashed, and matched against itself, without walking the tuple. A
    dataclass, so that the caches' sizes count what it holds (`app.bounded.approx_bytes`)."""

    value: tuple[Any, ...]
    hashed: int

    @classmethod
    def of(cls, value: tuple[Any, ...]) -> ShapeKey:
        return cls(value, hash(value))

    def __hash__(self) -> int:
        return self.hashed

    def __eq__(self, other: object) -> bool:
        return other is self or (
            isinstance(other, ShapeKey)
            and other.hashed == self.hashed
            and other.value == self.value
        )


def shaped(claim: ClaimInput) -> ClaimInput:
    """`claim` with its shape worked out, for a claim that will be judged many times."""
    return replace(claim, shape=ShapeKey.of(_claim_shape(claim)))


def shape_of(claims: Sequence[ClaimInput]) -> Any:
    return tuple(
        claim.shape if claim.shape is not None else ShapeKey.of(_claim_shape(claim))
        for claim in claims
    )


def _claim_shape(claim: ClaimInput) -> tuple[Any, ...]:
    return (
        claim.label,
        claim.prefix,
        claim.spec.path,
        claim.counters_back,
        tuple(
            (
                request.name,
                request.path,
                request.first_available is not None and request.exactly is None,
                tuple(
                    (
                        alt.name,
                        alt.path,
                        alt.device_class,
                        alt.selectors,
                        alt.allocation_mode,
                        alt.count,
                        alt.admin_access,
                        tuple(sorted((k, str(v)) for k, v in alt.capacity_requests.items())),
                        alt.device_tolerations,
                    )
                    for alt in request.alternatives
                ),
            )
            for request in claim.spec.requests
        ),
        tuple(
            (c.requests, c.match_attribute, c.distinct_attribute, c.compares_values)
            for c in claim.spec.constraints
        ),
    )
