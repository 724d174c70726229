"""Label selectors over namespace labels, with Kubernetes' meaning."""

from __future__ import annotations

from typing import Any

import pytest

from app.config.base import LabelSelector
from app.k8s.labels import EVERYTHING, Selector

LABELS = {"team": "research", "tier": "gpu"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ({}, True),
        ({"matchLabels": {"team": "research"}}, True),
        ({"matchLabels": {"team": "research", "tier": "cpu"}}, False),
        ({"matchLabels": {"owner": "x"}}, False),
        (
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "research"]}]},
            True,
        ),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, False),
        ({"matchExpressions": [{"key": "owner", "operator": "In", "values": ["a"]}]}, False),
        (
            {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["research"]}]},
            False,
        ),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["other"]}]}, True),
        ({"matchExpressions": [{"key": "owner", "operator": "NotIn", "values": ["a"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "owner", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "owner", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, False),
        (
            {
                "matchLabels": {"team": "research"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}],
            },
            True,
        ),
    ],
)
def test_selector_matches_like_kubernetes(selector: dict[str, Any], matches: bool) -> None:
    assert Selector.from_dict(selector).matches(LABELS) is matches


def test_empty_selector_matches_a_namespace_without_labels() -> None:
    assert EVERYTHING.matches({})
    assert Selector.from_dict(None) is EVERYTHING


@pytest.mark.parametrize(
    ("selector", "error"),
    [
        ({"matchLabels": {"a": 1}}, "matchLabels"),
        ({"matchExpressions": {}}, "matchExpressions: must be a list"),
        ({"matchExpressions": [{"operator": "In"}]}, "matchExpressions[0]"),
        ({"matchExpressions": [{"key": "a", "operator": "Has"}]}, "matchExpressions[0].operator"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "matchExpressions[0].values"),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "matchExpressions[0].values",
        ),
    ],
)
def test_invalid_selector_names_the_field(selector: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("[", r"\[").replace("]", r"\]")):
        Selector.from_dict(selector)


def test_selector_reads_as_kubectl_writes_it() -> None:
    selector = Selector.from_dict(
        {
            "matchLabels": {"team": "research"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["gpu", "a"]},
                {"key": "frozen", "operator": "DoesNotExist"},
            ],
        }
    )
    assert str(selector) == "team=research,tier in (a,gpu),!frozen"
    assert str(EVERYTHING) == "<all namespaces>"


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {"a": "1"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ],
)
def test_a_policy_file_selector_follows_label_selector_semantics(
    selector: dict[str, Any], labels: dict[str, str], expected: bool
) -> None:
    assert Selector.from_policy(LabelSelector.model_validate(selector)).matches(labels) is expected
