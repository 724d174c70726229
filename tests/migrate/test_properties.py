"""Properties of a rewrite: untouched documents stay byte-for-byte, changed ones read as
translation writes them, a second run changes nothing, and no input makes it crash."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cluster.view import ClusterView
from app.config import load_policy
from app.migrate.documents import Loaded, split
from app.migrate.edit import plain
from app.migrate.files import Templates, rewrite
from app.migrate.objects import Rules, translate
from app.migrate.run import for_migrate

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def _rules() -> Rules:
    return for_migrate(Rules.build(load_policy(None), ClusterView()))


def _run(text: str, name: str = "m.yaml") -> Any:
    rules = _rules()
    return rewrite(Path(name), text, rules, Templates(rules), apart=False)


_words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=8)
_scalars = st.one_of(
    st.integers(-5, 5000),
    st.booleans(),
    st.none(),
    _words,
    st.sampled_from(["yes", "0755", "1e3", ""]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_words, inner, min_size=1, max_size=3)
    ),
    max_leaves=10,
)
_comment = st.one_of(st.just(""), _words.map(lambda w: f"# {w}\n"))


@st.composite
def _other_document(draw: st.DrawFn) -> str:
    """A document with no pod spec, in a style of its own (flow or block, comments)."""
    body = {
        "kind": draw(st.sampled_from(["ConfigMap", "Service", "Secret"])),
        "data": draw(_values),
    }
    flow = draw(st.booleans())
    text = yaml.safe_dump(body, default_flow_style=flow, sort_keys=draw(st.booleans()))
    return draw(_comment) + text


@st.composite
def _pod_document(draw: st.DrawFn) -> str:
    names = draw(st.lists(_words.map(lambda w: "c" + w), min_size=1, max_size=3, unique=True))
    lines = [draw(_comment) + "apiVersion: v1", "kind: Pod", "metadata:", "  name: p", "spec:"]
    lines.append("  containers:")
    indent = draw(st.sampled_from(["  ", "    "]))
    for name in names:
        count = draw(st.sampled_from(["1", "2", "'1'", '"3"', "0"]))
        legacy = draw(st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu"]))
        lines += [
            f"{indent}- name: {name}  # {name}",
            f"{indent}  image: 'registry/{name}:1'",
            f"{indent}  resources:",
            f"{indent}    limits:",
            f"{indent}      cpu: 1",
            f"{indent}      {legacy}: {count}",
            f"{indent}    # after {name}",
        ]
    return "\n".join(lines) + "\n"


@st.composite
def _stream(draw: st.DrawFn) -> tuple[str, list[bool]]:
    kinds = draw(st.lists(st.booleans(), min_size=1, max_size=5))
    docs = [draw(_pod_document()) if pod else draw(_other_document()) for pod in kinds]
    markers = [draw(st.sampled_from(["---\n", "--- # doc\n"])) for _ in docs]
    text = "".join(m + d for m, d in zip(markers, docs, strict=True))
    if draw(st.booleans()):
        text = text.removeprefix(markers[0])
    return text, kinds


@FAST
@given(_stream())
def test_untouched_documents_and_fields_stay_byte_for_byte_and_pods_read_as_translated(
    case: tuple[str, list[bool]],
) -> None:
    text, kinds = case
    before = split(text)
    result = _run(text)
    assert result.problems == []
    after = [d for d in split(result.after) if "kind: ResourceClaimTemplate" not in d.body]
    assert len(after) == len(before)  # templates are new documents after the pods
    for doc, new, is_pod in zip(before, after, kinds, strict=True):
        if not is_pod:
            assert new.text == doc.text
            continue
        original = plain(Loaded(doc.body).data)
        outcome = translate(original, _rules())
        assert new.marker == doc.marker
        assert plain(Loaded(new.body).data) == (outcome.rewritten or original)
        # untouched fields keep their lines, comments and quoting as they were
        kept = [
            line for line in doc.body.splitlines() if "/gpu:" not in line and "/mig-" not in line
        ]
        assert set(kept) <= set(new.body.splitlines())


@FAST
@given(_stream())
def test_a_second_run_changes_nothing(case: tuple[str, list[bool]]) -> None:
    once = _run(case[0]).after
    assert _run(once).after == once


@FAST
@given(st.text(max_size=300))
def test_any_text_is_rewritten_or_reported_never_a_crash(text: str) -> None:
    result = _run(text)
    assert result.after == text or result.problems == []
    assert "".join(d.text for d in split(text)) == text if not result.problems else True


@FAST
@given(st.text(max_size=200))
def test_any_text_as_json_is_rewritten_or_reported_never_a_crash(text: str) -> None:
    result = _run(text, "m.json")
    assert result.after == text or result.problems == []


_odd = st.one_of(
    _scalars, st.lists(_scalars, max_size=2), st.dictionaries(_words, _scalars, max_size=2)
)


@st.composite
def _odd_pod(draw: st.DrawFn) -> str:
    """A pod whose fields (names, limits, claims, containers) may hold any type."""
    container = {
        "name": draw(st.one_of(_words, _odd)),
        "resources": draw(
            st.one_of(
                _odd,
                st.fixed_dictionaries(
                    {"limits": st.one_of(_odd, st.just({"nvidia.com/gpu": draw(_odd)}))},
                    optional={"claims": _odd, "requests": _odd},
                ),
            )
        ),
    }
    spec = {
        "containers": draw(st.one_of(st.just([container]), _odd)),
        "initContainers": draw(st.one_of(st.just([container]), st.just([]))),
    }
    if draw(st.booleans()):
        spec["resourceClaims"] = draw(_odd)
    kind = draw(st.sampled_from(["Pod", "Deployment"]))
    obj = {"kind": kind, "metadata": draw(st.one_of(st.just({"name": "p"}), _odd))}
    obj["spec"] = spec if kind == "Pod" else {"template": {"spec": spec}}
    return yaml.safe_dump(obj)


@FAST
@given(_odd_pod())
def test_a_malformed_pod_is_reported_with_a_field_path_or_rewritten_never_a_crash(
    text: str,
) -> None:
    result = _run(text)
    if result.problems:
        assert result.after == text
        assert all(p.path for p in result.problems)
    else:
        assert _run(result.after).after == result.after
