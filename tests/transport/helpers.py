"""What the transport tests share: a cluster source whose template creates take time (or fail),
and admitting reviews through the real ASGI app concurrently."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson

from app.cluster.static import StaticSource
from app.cluster.view import ClusterView
from app.config import Settings, load_policy
from app.errors import TemplateCreateError
from app.metrics import Metrics
from app.transport.app import create_app

Obj = dict[str, Any]


class SlowSource(StaticSource):
    """Creates take `delay` seconds, as an API call does; counts calls; may fail."""

    def __init__(
        self, objects: list[Obj], delay: float = 0.02, error: str = "", refused: bool = False
    ) -> None:
        super().__init__(ClusterView(), objects=objects)
        self.delay = delay
        self.error = error
        self.refused = refused
        self.calls: list[str] = []

    async def create_claim_template(self, template: dict[str, Any]) -> None:
        self.calls.append(template["metadata"]["name"])
        await asyncio.sleep(self.delay)
        if self.error:
            raise TemplateCreateError(self.error, refused=self.refused)
        await super().create_claim_template(template)


async def admit_concurrently(
    source: SlowSource, bodies: list[Obj], policy: Any = None
) -> list[Obj]:
    app = create_app(Settings(), policy=policy or load_policy(), source=source, metrics=Metrics())
    await source.start()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
        replies = await asyncio.gather(
            *(
                client.post(
                    "/mutate", content=orjson.dumps(b), headers={"content-type": "application/json"}
                )
                for b in bodies
            )
        )
    assert all(r.status_code == 200 for r in replies)
    return [r.json()["response"] for r in replies]
