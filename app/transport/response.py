"""The only code that builds an AdmissionReview response.

The uid is set here, once, at the boundary; every answer, allowed or denied, patched or not, is
shaped by `review_response`.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from app.pipeline import Decision


def review_response(uid: str, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview (admission.k8s.io/v1) that answers request `uid`."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {
            "code": decision.code,
            "reason": decision.reason,
            "message": decision.message,
        }
    elif decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(decision.patch))).decode("ascii")
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def encode(body: dict[str, Any]) -> bytes:
    return orjson.dumps(body)
