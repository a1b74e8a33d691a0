"""FastAPI application factory. Routes by feature live in api/routes/; the HTTP contract
(errors, correlation, auth, rate limits, idempotency, body limits) is installed once, here."""

from __future__ import annotations

import gc
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from api.console import router as console_router
from api.contract import include_router, install_contract
from api.routes import ROUTERS, metrics
from yana import NAME, __version__
from yana.clients import get_async_redis
from yana.settings import get_settings


@asynccontextmanager
async def lifespan(app: FastAPI):
    s = get_settings()
    app.state.settings = s
    app.state.started_at = time.monotonic()
    app.state.redis = get_async_redis(s)
    # Everything imported so far (FastAPI, pydantic, torch, chromadb...) lives as long as the
    # process: keep it out of the collector's full passes, which otherwise pause requests ~60 ms.
    gc.freeze()
    try:
        yield
    finally:
        await app.state.redis.aclose()


def create_app() -> FastAPI:
    # /docs and /redoc load their scripts from this server (the package's static files), not a CDN.
    app = FastAPIOffline(
        title=NAME,
        version=__version__,
        description="yana: label knowledge, hybrid search, chat fast path and jobs.",
        lifespan=lifespan,
    )
    for router in ROUTERS:
        include_router(app, router)
    include_router(app, console_router)  # the web console at /console (static files, open like /docs)
    install_contract(app)
    metrics.install(app)
    return app


app = create_app()
