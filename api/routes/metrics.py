"""Prometheus metrics: GET /metrics (text exposition format).

Per process: HTTP requests by route, method and status, and their latency. With several API
processes (uvicorn --workers N) set PROMETHEUS_MULTIPROC_DIR to an empty folder shared by them, and
the scrape adds up every process (prometheus_client's multiprocess mode).

Read from Redis at scrape time, so they are the same whichever process answers: jobs by kind and
status (the active ones plus the most recent JOBS_WINDOW), queue depth per Celery queue, index
writes of the active collection (rate() of it is the embedding rate), the pHash index size and the
webhook backlog.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter as Tally

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from api.contract import ContractRoute
from pipelines.neardup.index import SHA1_KEY
from pipelines.runtime.jobs import ACTIVE, RECENT, WEBHOOKS_DUE, job_key
from pipelines.search import lexical
from pipelines.search.collections import active_name
from workers.queues import QUEUES
from yana.clients import get_redis

router = APIRouter(tags=["operations"], route_class=ContractRoute)

JOBS_WINDOW = 1000  # terminal jobs counted: the most recent ones (the record index keeps 7 days)

_REGISTRY = CollectorRegistry()
REQUESTS = Counter("yana_http_requests", "HTTP requests answered", ["route", "method", "status"], registry=_REGISTRY)
LATENCY = Histogram(
    "yana_http_request_duration_seconds",
    "HTTP request latency",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 11, 30),
    registry=_REGISTRY,
)


class StoreCollector:
    """Gauges computed from Redis at scrape time (a few small commands, bounded by REDIS_TIMEOUT_S)."""

    def collect(self):
        r = get_redis()
        jobs = GaugeMetricFamily(
            "yana_jobs", "jobs by kind and status (active + most recent)", labels=["kind", "status"]
        )
        ids = set(r.smembers(ACTIVE)) | set(r.zrevrange(RECENT, 0, JOBS_WINDOW - 1))
        pipe = r.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(job_key(job_id), "kind", "status")
        tally = Tally(tuple(row) for row in pipe.execute() if row[0])
        for (kind, status), n in sorted(tally.items()):
            jobs.add_metric([kind, status], n)
        yield jobs

        depth = GaugeMetricFamily("yana_queue_depth", "messages waiting per Celery queue", labels=["queue"])
        pipe = r.pipeline(transaction=False)
        for q in QUEUES:
            pipe.llen(q)
        for q, n in zip(QUEUES, pipe.execute(), strict=True):
            depth.add_metric([q], n)
        yield depth

        collection = active_name(r)
        writes = CounterMetricFamily(
            "yana_index_chunk_writes", "chunks embedded and written to the active collection", labels=["collection"]
        )
        chunks = GaugeMetricFamily("yana_index_chunks", "chunks in the active collection", labels=["collection"])
        if collection:
            writes.add_metric([collection], lexical.current_seq(r, collection))
            chunks.add_metric([collection], lexical.count(r, collection))
        yield writes
        yield chunks
        yield GaugeMetricFamily("yana_phash_index_size", "images in the near-duplicate index", value=r.hlen(SHA1_KEY))
        yield GaugeMetricFamily("yana_webhook_backlog", "webhook deliveries waiting", value=r.zcard(WEBHOOKS_DUE))


def _exposition() -> bytes:
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        registry.register(_ProcessLocal())
    registry.register(StoreCollector())
    return generate_latest(registry)


class _ProcessLocal:
    def collect(self):
        yield from _REGISTRY.collect()


@router.get("/metrics", operation_id="metrics", include_in_schema=False)
async def metrics() -> Response:
    body = await asyncio.to_thread(_exposition)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


class MetricsMiddleware:
    """Counts every answered request by its route template (not the raw path: bounded labels)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope.get("method", "")
            REQUESTS.labels(route, method, str(status["code"])).inc()
            LATENCY.labels(route, method).observe(time.perf_counter() - started)


def install(app: FastAPI) -> None:
    """GET /metrics plus the request counters (outermost: they see every answer, 401 and 429 too)."""
    app.include_router(router)
    app.add_middleware(MetricsMiddleware)
