"""What the HTTP contract costs per request, against a baseline app without it (same run).

    .venv/bin/python bench/contract_overhead.py [--n 2000]

Starts a private redis-server, serves both apps in process (httpx ASGI transport, no sockets, so
the numbers are the app's own time), and prints p50/p95 per request for:
  baseline   - the routes with error handlers only
  contract   - the full contract, public route (correlation, versions, access log)
  contract+  - the full contract, protected route (bearer check + token bucket in Redis)
and the token-bucket hit rate on its own (sequential and 50 concurrent).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from fastapi import APIRouter, FastAPI  # noqa: E402

from api.contract import ContractRoute  # noqa: E402
from api.schemas import Envelope  # noqa: E402
from cli import processes  # noqa: E402

bench = APIRouter(tags=["bench"], route_class=ContractRoute)
plain = APIRouter(tags=["bench"])  # the baseline's: FastAPI's own route class


class Pong(Envelope):
    ok: bool = True


@bench.get("/bench/ping", operation_id="bench_ping", response_model=Pong)
@plain.get("/bench/ping", operation_id="bench_ping", response_model=Pong)
async def ping() -> dict:
    return {"ok": True}


async def timed(client: httpx.AsyncClient, path: str, n: int, headers: dict | None = None) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = await client.get(path, headers=headers)
        out.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200, r.text
    return out


def summary(name: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=20)
    return f"{name:<11} p50 {statistics.median(ms):6.3f} ms   p95 {q[18]:6.3f} ms   ({len(ms)} requests)"


async def main(n: int, redis_url: str) -> None:
    from api.contract.errors import install_error_handlers
    from api.contract.ratelimit import Rate, TokenBucketLimiter
    from api.routes import ROUTERS
    from yana.clients import get_async_redis
    from yana.settings import get_settings

    os.environ.update(
        REDIS_URL=redis_url,
        AUTH_ENABLED="true",
        AUTH_TOKENS="bench-token",
        RATE_LIMIT="1000000/second",
        RATE_BURST="1000000",
    )
    get_settings.cache_clear()
    logging.getLogger("yana.access").setLevel(logging.WARNING)  # measure the work, not stderr

    baseline = FastAPI()
    for r in ROUTERS:
        baseline.include_router(r)
    baseline.include_router(plain)
    install_error_handlers(baseline)

    from api.main import create_app

    contract = create_app()
    contract.include_router(bench)
    contract.state.settings = get_settings()
    contract.state.redis = get_async_redis()
    contract.state.started_at = time.monotonic()

    auth = {"Authorization": "Bearer bench-token"}
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=baseline), base_url="http://b") as b,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=contract), base_url="http://c") as c,
    ):
        await timed(b, "/bench/ping", 200)
        await timed(c, "/v1/version", 200)
        await timed(c, "/bench/ping", 200, auth)
        # The protected route must really be checked (a route the contract does not cover would
        # measure nothing): no token is a 401.
        unauthorised = await c.get("/bench/ping")
        assert unauthorised.status_code == 401, unauthorised.text
        base = await timed(b, "/bench/ping", n)
        public = await timed(c, "/v1/version", n)
        protected = await timed(c, "/bench/ping", n, auth)
    print(summary("baseline", base))
    print(summary("contract", public))
    print(summary("contract+", protected))
    print(
        f"overhead    p50 +{statistics.median(public) - statistics.median(base):.3f} ms public, "
        f"+{statistics.median(protected) - statistics.median(base):.3f} ms protected (auth + Redis bucket)"
    )

    r = get_async_redis()
    limiter = TokenBucketLimiter(r)
    rate = Rate.parse("1000000/second", 1000000)
    t = time.perf_counter()
    for _ in range(n):
        await limiter.hit("bench:seq", rate)
    seq = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(n // 50):
        await asyncio.gather(*(limiter.hit("bench:conc", rate) for _ in range(50)))
    conc = (n // 50) * 50 / (time.perf_counter() - t)
    await r.aclose()
    await contract.state.redis.aclose()
    print(f"bucket      {seq:,.0f} hits/s sequential, {conc:,.0f} hits/s with 50 concurrent (one process)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, processes.private_redis(Path(tmp)) as svc:
        asyncio.run(main(args.n, svc.url))
