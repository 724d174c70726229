"""Regular expressions user input reaches run in linear time (RE2, as Kubernetes' CEL).

`"a" * 28 + "!"` against `^(a+)+$` took 16 s in Python's backtracking `re`; RE2 answers at once.
A pattern RE2 refuses (backreferences, lookaround) is an error with a clear message: for a
constant pattern in a selector a compile error with its position, for a policy mapping a startup
error naming the rule.
"""

from __future__ import annotations

import time

import pytest

from app.cel.engine import SELECTOR, Engine, Environment
from app.cel.errors import CelCompileError, CelEvalError
from app.config.policy import parse_policy
from app.errors import PolicyError

ANY = Environment("test-any", ("x",), None)
EVIL = "^(a+)+$"
SUBJECT = "a" * 28 + "!"


@pytest.mark.parametrize(
    "expression",
    [
        f'x.matches("{EVIL}")',
        f'x.find("{EVIL}") == ""',
        f'x.findAll("{EVIL}").size() == 0',
        f'matches(x, "{EVIL}")',
    ],
)
def test_a_catastrophic_pattern_is_answered_in_linear_time(engine: Engine, expression: str) -> None:
    program = engine.compile(expression, ANY)
    started = time.perf_counter()
    result = program.evaluate(engine.activation(ANY, {"x": SUBJECT}))
    assert time.perf_counter() - started < 0.5
    assert result in (False, True)


def test_a_pattern_from_a_variable_runs_in_linear_time_too(engine: Engine) -> None:
    env = Environment("test-two", ("x", "p"), None)
    program = engine.compile("x.matches(p) || x.find(p) != '' || x.findAll(p).size() > 0", env)
    started = time.perf_counter()
    assert program.evaluate(engine.activation(env, {"x": SUBJECT, "p": EVIL})) is False
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize("pattern", [r"(a)\\1", "(?=a)b", "(?<!a)b", "a++"])
@pytest.mark.parametrize("function", ["matches", "find", "findAll"])
def test_a_constant_pattern_re2_refuses_does_not_compile(
    engine: Engine, function: str, pattern: str
) -> None:
    expression = f'[device.driver.{function}("{pattern}")].size() == 1'
    with pytest.raises(CelCompileError) as caught:
        engine.compile(expression, SELECTOR)
    assert "regular expression" in caught.value.message
    assert caught.value.column == len("[device.driver.") + len(function) + 2


def test_a_pattern_re2_refuses_at_run_time_is_an_evaluation_error(engine: Engine) -> None:
    env = Environment("test-two", ("x", "p"), None)
    program = engine.compile("x.find(p) == ''", env)
    with pytest.raises(CelEvalError, match="regular expression"):
        program.evaluate(engine.activation(env, {"x": "a", "p": "(a)\\1"}))


@pytest.mark.parametrize(
    ("text", "pattern", "found"),
    [
        ("gpu-17", "[0-9]+", "17"),
        ("abc", "", ""),
        ("a1b22c333", r"\\d+", "1"),
        ("éa", "a", "a"),
    ],
)
def test_find_keeps_its_results(engine: Engine, text: str, pattern: str, found: str) -> None:
    program = engine.compile(f'x.find("{pattern}")', ANY)
    assert program.evaluate(engine.activation(ANY, {"x": text})) == found


def test_find_all_keeps_its_results(engine: Engine) -> None:
    program = engine.compile(r'x.findAll("\\d+") + x.findAll("[a-c]", 2)', ANY)
    assert program.evaluate(engine.activation(ANY, {"x": "a1b22c333"})) == [
        "1",
        "22",
        "333",
        "a",
        "b",
    ]


def test_a_mapping_pattern_re2_refuses_fails_startup_naming_the_rule() -> None:
    text = """
mappings:
  - resource: nvidia.com/gpu
    deviceClassName: gpu.nvidia.com
  - resource: 'nvidia.com/mig-(?=x)(.+)'
    pattern: true
    deviceClassName: mig.nvidia.com
"""
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "policy.yaml")
    message = str(caught.value)
    assert "mappings.1" in message
    assert "nvidia.com/mig-(?=x)(.+)" in message
    assert "RE2" in message


def test_a_mapping_group_reference_past_the_groups_fails_startup() -> None:
    text = """
mappings:
  - resource: 'nvidia.com/mig-(.+)'
    pattern: true
    deviceClassName: mig-$2.nvidia.com
"""
    with pytest.raises(PolicyError, match=r"\$2"):
        parse_policy(text, "policy.yaml")


def test_mapping_patterns_match_in_linear_time() -> None:
    from app.translation.legacy import MappingResolver

    policy = parse_policy(
        """
mappings:
  - resource: 'example.com/(a+)+'
    pattern: true
    deviceClassName: gpu.example.com
""",
        "policy.yaml",
    )
    resolver = MappingResolver(policy.mappings)
    started = time.perf_counter()
    assert resolver._from_config("example.com/" + "a" * 40 + "!") is None
    assert time.perf_counter() - started < 0.5


def test_legacy_globs_match_in_linear_time_and_as_before() -> None:
    from app.config.policy import LegacyResources
    from app.translation.legacy import LegacyMatcher

    matcher = LegacyMatcher(
        LegacyResources(names=("nvidia.com/mig-*", "gpu.intel.com/*", "x.io/a?c", "y.io/[!b]z"))
    )
    assert matcher("nvidia.com/mig-1g.10gb")
    assert matcher("gpu.intel.com/i915")
    assert matcher("x.io/abc")
    assert matcher("y.io/az")
    assert not matcher("y.io/bz")
    assert not matcher("nvidia.com/gpu")
    assert not matcher("xnvidia.com/mig-1")
    started = time.perf_counter()
    assert not matcher("gpu.intel.co" + "m" * 50_000 + "/")
    assert time.perf_counter() - started < 0.5
