"""The baseline: a bare FastAPI app that answers every review `allowed` with its uid.

It runs under the same uvicorn setup as the webhook (TLS, uvloop, httptools, no access log), so
the difference between the two runs is the cost of dra-webhook itself: reading the body with a
size limit, decoding the review, the pipeline, encoding the answer and the metrics.
"""

from __future__ import annotations

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)


async def _echo(http: Request) -> Response:
    review = orjson.loads(await http.body())
    answer = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }
    return Response(orjson.dumps(answer), media_type="application/json")


@app.post("/mutate")
async def mutate(http: Request) -> Response:
    return await _echo(http)


@app.post("/validate")
async def validate(http: Request) -> Response:
    return await _echo(http)


@app.get("/readyz")
async def readyz() -> Response:
    return Response(b'{"ready":true}', media_type="application/json")
