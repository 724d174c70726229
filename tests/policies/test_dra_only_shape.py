"""dra-only's fast reader of a pod spec's legacy requests (`_raw_shape`, straight over the dicts)
says what `legacy_requests` says: the one container walker is the reference, and the fast one
is pinned to it over generated pod specs, well formed or not."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.config.policy import LegacyResources
from app.errors import ObjectShapeError
from app.k8s.objects import PodSpecRef
from app.policies.dra_only import _raw_shape, _shape
from app.translation.legacy import LegacyMatcher, legacy_requests

MATCHER = LegacyMatcher(LegacyResources())
NAMES = (
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "amd.com/gpu",
    "cpu",
    "memory",
    "example.com/x",
)
AMOUNTS = st.one_of(
    st.sampled_from(["0", "1", "2", "0.5", "1k", "-1", "", "x"]),
    st.integers(min_value=-2, max_value=4),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-2, max_value=4),
    st.none(),
    st.booleans(),
    st.just({"a": 1}),
)
QUANTITIES = st.dictionaries(st.sampled_from(NAMES), AMOUNTS, max_size=3)


def _resources() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.just("bad"),
        st.fixed_dictionaries(
            {},
            optional={
                "limits": st.one_of(QUANTITIES, st.none(), st.just([1])),
                "requests": st.one_of(QUANTITIES, st.none(), st.just("x")),
            },
        ),
    )


CONTAINER = st.one_of(
    st.fixed_dictionaries(
        {"name": st.one_of(st.sampled_from(["a", "b", ""]), st.just(3))},
        optional={
            "resources": _resources(),
            "restartPolicy": st.sampled_from(["Always", "Never"]),
        },
    ),
    st.just("not a container"),
)
SPEC = st.fixed_dictionaries(
    {},
    optional={
        "containers": st.one_of(st.lists(CONTAINER, max_size=3), st.just({"a": 1})),
        "initContainers": st.lists(CONTAINER, max_size=2),
        "ephemeralContainers": st.lists(CONTAINER, max_size=2),
    },
)


@settings(max_examples=400, deadline=None)
@given(SPEC)
def test_the_fast_reader_agrees_with_legacy_requests_or_defers_to_it(spec: dict[str, Any]) -> None:
    ref = PodSpecRef.of(spec, "spec", "/spec")
    fast = _raw_shape(ref, MATCHER)
    try:
        reference = _shape(legacy_requests(ref, MATCHER))
    except (ObjectShapeError, ValueError, TypeError):
        assert fast is None  # what the walker refuses, the fast reader leaves to it
        return
    if fast is not None:
        assert fast == reference


WELL_FORMED = st.fixed_dictionaries(
    {},
    optional={
        field: st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["a", "b"])},
                optional={
                    "resources": st.fixed_dictionaries(
                        {},
                        optional={
                            "limits": st.dictionaries(
                                st.sampled_from(NAMES),
                                st.sampled_from(["0", "1", "2", 4]),
                                max_size=3,
                            ),
                            "requests": st.dictionaries(
                                st.sampled_from(NAMES),
                                st.sampled_from(["0", "1", "2", 4]),
                                max_size=3,
                            ),
                        },
                    ),
                    "restartPolicy": st.sampled_from(["Always", "Never"]),
                },
            ),
            max_size=3,
        )
        for field in ("containers", "initContainers", "ephemeralContainers")
    },
)


@settings(max_examples=300, deadline=None)
@given(WELL_FORMED)
def test_on_well_formed_specs_the_fast_reader_answers_and_agrees(spec: dict[str, Any]) -> None:
    ref = PodSpecRef.of(spec, "spec", "/spec")
    assert _raw_shape(ref, MATCHER) == _shape(legacy_requests(ref, MATCHER))
