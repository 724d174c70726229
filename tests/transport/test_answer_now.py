"""The webhook's answer without a task (`_Webhook.answer_now`, asked by the server's protocol
once a small review's body is in): the very answer the ASGI path gives, or None where the review
must await something, which the ASGI path then answers."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.helpers import FIXTURES, AppHarness, load_fixture, review

JSON = [(b"content-type", b"application/json")]
CAPTURED = sorted(path.stem for path in FIXTURES.glob("*.json"))
ANSWERED_LATER = {
    # (endpoint, review): what awaits before its answer
    ("/validate", "resourceclaim-create"): "selectors compiled in steps",
    ("/validate", "resourceclaim-create-via-v1beta2"): "selectors compiled in steps",
    ("/validate", "resourceclaim-update"): "selectors compiled in steps",
    ("/validate", "resourceclaimtemplate-create"): "selectors compiled in steps",
    ("/validate", "deviceclass-create-extended-resource"): "selectors compiled in steps",
    ("/validate", "deviceclass-update-label"): "selectors compiled in steps",
}


def _scope(path: str, headers: list[tuple[bytes, bytes]] = JSON) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": headers,
        "query_string": b"timeout=10s",
        "state": {},
    }


def _now(app: AppHarness, path: str, body: bytes, **kwargs: Any) -> Any:
    return app.client.app.answer_now(_scope(path, **kwargs), body)  # type: ignore[attr-defined]


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
@pytest.mark.parametrize("name", CAPTURED)
def test_an_answer_given_at_once_is_the_answer_the_asgi_path_gives(
    app: AppHarness, name: str, path: str
) -> None:
    body = orjson.dumps(load_fixture(name))
    now = _now(app, path, body)
    served = app.post(path.lstrip("/"), body)
    if (path, name) in ANSWERED_LATER:
        assert now is None
        return
    assert now is not None
    status, headers, content = now
    assert (status, content) == (served.status_code, served.content)
    assert dict(headers)[b"content-type"].decode() == served.headers["content-type"]


@pytest.mark.parametrize("name", ["pod-create-legacy-gpu", "pod-create-with-resourceclaims"])
def test_the_pod_reviews_of_every_admission_are_answered_at_once(
    app: AppHarness, name: str
) -> None:
    status, _, content = _now(app, "/validate", orjson.dumps(load_fixture(name)))
    assert status == 200
    assert orjson.loads(content)["response"]["uid"] == load_fixture(name)["request"]["uid"]


@pytest.mark.parametrize(
    ("case", "body", "headers"),
    [
        # its namespace is not in the view yet: looked up (awaited) first
        ("unknown-namespace", review("pod-create-legacy-gpu", namespace="brand-new"), JSON),
        # a claim's selectors are compiled in steps, the event loop turning between them
        ("claim", review("resourceclaim-create", namespace="gpu-e2e"), JSON),
        # translated: its ResourceClaimTemplate is created (awaited) before the answer
        ("translated", review("pod-create-legacy-gpu", namespace="ml-research"), JSON),
        ("not-json", b"{nope", JSON),
        ("content-type", load_fixture("pod-create-legacy-gpu"), [(b"content-type", b"text/plain")]),
    ],
)
def test_a_review_that_waits_or_is_refused_is_left_to_the_asgi_path(
    app: AppHarness, case: str, body: Any, headers: list[tuple[bytes, bytes]]
) -> None:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    path = "/mutate" if case == "translated" else "/validate"
    assert _now(app, path, raw, headers=headers) is None
    served = app.client.post(
        path, content=raw, headers=dict((k.decode(), v.decode()) for k, v in headers)
    )
    if case in ("not-json", "content-type"):  # refused with the reason, by the ASGI path
        assert served.status_code == 400
        assert ("not valid JSON" if case == "not-json" else "content type") in served.text
        return
    assert served.status_code == 200  # answered there, after what it awaited
    response = served.json()["response"]
    assert response["uid"] == orjson.loads(raw)["request"]["uid"]
    if case == "translated":
        assert response["allowed"] and response["patch"]


def test_a_translated_pod_is_answered_at_once_once_its_template_is_there(app: AppHarness) -> None:
    body = orjson.dumps(review("pod-create-legacy-gpu", namespace="ml-research"))
    dry = orjson.dumps(review("pod-create-legacy-gpu", namespace="ml-research", dryRun=True))
    assert _now(app, "/mutate", dry) is not None  # a dry run creates nothing: nothing to await
    assert _now(app, "/mutate", body) is None  # its template to create first (awaited)
    served = app.post("mutate", body)
    assert orjson.loads(served.content)["response"]["patch"]
    status, _, content = _now(app, "/mutate", body)  # the template is there now
    assert (status, content) == (served.status_code, served.content)
