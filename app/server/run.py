"""Running the app under uvicorn over TLS (uvloop + httptools), one or more workers.

The app is named by its factory string (`APP_FACTORY`), not imported: each worker builds it
from the DRA_WEBHOOK_* variables.
"""

from __future__ import annotations

import os
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from app.certs import TLS_CERT, TLS_KEY, CertReloader
from app.config import Settings
from app.logs import logging_config
from app.server.metrics_dir import MULTIPROC_ENV, prepare_multiprocess_dir
from app.server.protocol import ConnectionLimits, LimitedHttpToolsProtocol

APP_FACTORY = "app.transport.app:create_app_from_env"


class _TlsConfig(uvicorn.Config):
    """uvicorn's Config with a reloading SSLContext in place of its fixed one.

    `load()` runs in each worker process, so every worker builds its own reloader.
    """

    def __init__(
        self,
        *args: Any,
        cert_dir: str,
        reload_interval: float,
        connection_limits: ConnectionLimits,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.cert_dir = cert_dir
        self.reload_interval = reload_interval
        self.connection_limits = connection_limits

    def load(self) -> None:
        super().load()
        from pathlib import Path

        self.ssl = CertReloader(Path(self.cert_dir), self.reload_interval).context


def settings_environment(settings: Settings) -> dict[str, str]:
    """The DRA_WEBHOOK_* variables that rebuild `settings` in a worker process."""
    env: dict[str, str] = {}
    for name, value in settings.model_dump().items():
        if value is not None:
            env[f"DRA_WEBHOOK_{name.upper()}"] = str(value)
    return env


def build_config(settings: Settings) -> uvicorn.Config:
    cert_dir = str(settings.cert_dir)
    return _TlsConfig(
        APP_FACTORY,
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        loop="uvloop",
        # httptools, with the limits it lacks (docs/security.md, "Transport limits")
        http=LimitedHttpToolsProtocol,
        timeout_keep_alive=settings.idle_timeout_seconds,
        h11_max_incomplete_event_size=settings.max_header_bytes,
        lifespan="on",
        ssl_certfile=os.path.join(cert_dir, TLS_CERT),
        ssl_keyfile=os.path.join(cert_dir, TLS_KEY),
        timeout_graceful_shutdown=int(settings.shutdown_grace_seconds),
        # Applied by uvicorn here and again in every worker process it spawns.
        log_config=logging_config(settings.log_level),
        access_log=False,
        # Only the API server calls, directly: no proxy's X-Forwarded-* to read (uvicorn's
        # middleware for them costs ~1 µs a review).
        proxy_headers=False,
        server_header=False,
        cert_dir=cert_dir,
        reload_interval=settings.cert_reload_interval_seconds,
        connection_limits=ConnectionLimits(
            max_connections=settings.max_connections,
            max_header_bytes=settings.max_header_bytes,
            header_timeout=settings.header_timeout_seconds,
            body_timeout=settings.body_timeout_seconds,
        ),
    )


def multiprocess_metrics(settings: Settings) -> Settings:
    """Point prometheus-client at a fresh shared folder when several workers serve.

    Must run before any worker imports prometheus_client (it reads the variable once, at import);
    workers are spawned afterwards and inherit it. With one worker the variable is removed so a
    stray value in the environment cannot switch the single process to file-backed metrics.
    """
    if settings.workers == 1:
        os.environ.pop(MULTIPROC_ENV, None)
        return settings
    folder = prepare_multiprocess_dir(settings.metrics_dir)
    os.environ[MULTIPROC_ENV] = str(folder)
    return settings.model_copy(update={"metrics_dir": folder})


def serve(settings: Settings) -> None:
    """Serve until SIGTERM/SIGINT; in-flight requests are drained before exit."""
    settings = multiprocess_metrics(settings)
    os.environ.update(settings_environment(settings))
    config = build_config(settings)
    if settings.workers > 1:
        sock = config.bind_socket()
        Multiprocess(config, sockets=[sock]).run()
    else:
        uvicorn.Server(config).run()
