"""The admission endpoints' HTTP in plain ASGI: headers, body and answer, without the layers.

A review passes through uvicorn, then FastAPI's and Starlette's stack: FastAPI's body-limit,
telemetry and exit-stack middleware, Starlette's error and exception middleware, the router, and
a Request and a Response object per review. The admission endpoints use none of what those add
(no dependencies, no HTTPException, no streaming), and on the denial path the layers cost about
a tenth of the review. `AdmissionFront` answers POST /mutate and /validate straight from the
ASGI scope and hands every other request to the FastAPI app, unchanged; the same handler serves
both ways (`app.transport.app`).

A review whose body is in is also answered without a task where nothing in it waits
(`AdmissionFront.answer_now`, which this server's protocol asks first: app.server.limits
ANSWER_NOW); the handler's own `answer_now` says which reviews.

What the layers did that still matters is done here: the body is read whole with
`ClientDisconnect` on a disconnect, the answer carries its length and content type, and an
exception the handler does not answer itself reaches uvicorn, which logs it and answers 500.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, NamedTuple

from fastapi import FastAPI
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from app.server.limits import ANSWER

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = "application/json"
_JSON = JSON.encode()
_NONE: dict[str, Any] = {}


class Answer(NamedTuple):
    """What the handler answers: status, body, and whether to ask for a retry (429)."""

    status: int
    body: bytes = b""
    json: bool = True
    retry_after: bool = False

    def headers(self) -> list[tuple[bytes, bytes]]:
        """As Starlette's Response writes them: length, then type."""
        headers = [(b"content-length", b"%d" % len(self.body))]
        if self.json:
            headers.append((b"content-type", _JSON))
        if self.retry_after:
            headers.append((b"retry-after", b"1"))
        return headers


def body_headers(scope: Scope) -> tuple[str, str | None]:
    """The request's content type ("" if none) and content length (None if none), first of
    each as Starlette's `Headers.get` reads them."""
    content_type: bytes | None = None
    length: bytes | None = None
    for name, value in scope["headers"]:
        if name == b"content-type":
            if content_type is None:
                content_type = value
        elif name == b"content-length" and length is None:
            length = value
    return (
        content_type.decode("latin-1") if content_type is not None else "",
        length.decode("latin-1") if length is not None else None,
    )


async def receive_body(receive: Receive, chunk: Callable[[int], None] | None = None) -> bytes:
    """The whole body; `chunk(size)` is called for every part as it comes (to bound them)."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            part = message.get("body", b"")
            if chunk is not None:
                chunk(len(part))
            if not message.get("more_body", False):
                if not parts:
                    return bytes(part)
                parts.append(part)
                return b"".join(parts)
            parts.append(part)
        elif kind == "http.disconnect":
            raise ClientDisconnect()


async def send_answer(send: Send, answer: Answer) -> None:
    await send(
        {"type": "http.response.start", "status": answer.status, "headers": answer.headers()}
    )
    await send({"type": "http.response.body", "body": answer.body})


Handler = Callable[[Scope, Receive], Awaitable[Answer]]
NowHandler = Callable[[Scope, bytes], "Answer | None"]


def as_endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """An admission handler as a Starlette endpoint (for the router)."""

    async def endpoint(http: Request) -> Response:
        answer = await handler(http.scope, http.receive)
        return Response(
            answer.body,
            status_code=answer.status,
            headers={"retry-after": "1"} if answer.retry_after else None,
            media_type=JSON if answer.json else None,
        )

    return endpoint


class AdmissionFront(FastAPI):
    """The FastAPI app, with POST to the admission paths answered before its middleware.

    `admission` maps a path to its handler; anything else (other paths and methods, lifespan)
    goes through FastAPI as usual. The same paths stay registered as routes, so a request
    that reaches the router another way (a root path) is still served.
    """

    admission: dict[str, Handler]
    admission_now: dict[str, NowHandler]
    """The same paths' answers without awaiting, for a request whose body is in (`answer_now`):
    None where the handler must await something (then the task runs `admission`'s)."""

    def answer_now(
        self, scope: Scope, body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        """The whole response to a POST whose body has been read, when one of the admission
        paths can give it at once (app.server.protocol asks, before starting a task); None to
        serve the request as usual."""
        handler = self.admission_now.get(scope["path"])
        if handler is None:
            return None
        answer = handler(scope, body)
        if answer is None:
            return None
        return answer.status, answer.headers(), answer.body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self.admission.get(scope["path"])
            if handler is not None:
                answer = await handler(scope, receive)
                # this server's protocol writes it at once (app.server.limits.ANSWER)
                direct = scope.get("extensions", _NONE).get(ANSWER)
                if direct is None or not direct["answer"](
                    answer.status, answer.headers(), answer.body
                ):
                    await send_answer(send, answer)
                return
        await super().__call__(scope, receive, send)
