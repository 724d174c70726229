"""Semantic versions parse and order like blang/semver, as Kubernetes' semver() uses it."""

import itertools

import pytest

from app.cel.semver import SemverError, parse_semver


@pytest.mark.parametrize(
    "ordered",
    [
        [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.1.0",
            "2.0.0",
        ]
    ],
)
def test_semver_precedence_follows_the_semver_spec(ordered: list[str]) -> None:
    versions = [parse_semver(v) for v in ordered]
    assert sorted(reversed(versions)) == versions
    for a, b in itertools.pairwise(versions):
        assert a.compare(b) == -1 and b.compare(a) == 1


def test_build_metadata_is_kept_for_display_but_ignored_for_equality() -> None:
    v = parse_semver("1.2.3-rc.1+build.5")
    assert str(v) == "1.2.3-rc.1+build.5"
    assert v == parse_semver("1.2.3-rc.1+other")
    assert hash(v) == hash(parse_semver("1.2.3-rc.1"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Version string empty"),
        ("v1.0", "No Major.Minor.Patch elements found"),
        ("1.0", "No Major.Minor.Patch elements found"),
        ("01.1.1", "leading zeroes"),
        ("1.1.1-01", "Leading zeroes"),
        ("1.1.1-", "Prerelease is empty"),
        ("1.1.1+", "Build meta data is empty"),
        ("1.1.1-a_b", "Invalid character"),
        ("1.a.1", "Invalid character"),
    ],
)
def test_invalid_semver_raises_with_the_blang_message(text: str, message: str) -> None:
    with pytest.raises(SemverError, match=message):
        parse_semver(text)


@pytest.mark.parametrize(
    ("text", "normalized"),
    [("v1.0.0", "1.0.0"), ("1.0", "1.0.0"), ("01.01.01", "1.1.1"), ("v2", "2.0.0")],
)
def test_normalize_drops_v_pads_and_strips_leading_zeros(text: str, normalized: str) -> None:
    assert str(parse_semver(text, normalize=True)) == normalized


def test_normalize_refuses_prerelease_on_a_short_version() -> None:
    with pytest.raises(SemverError, match="short version"):
        parse_semver("1.0-rc", normalize=True)
