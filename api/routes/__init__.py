"""Every feature's router, in one list that api.main includes."""

from api.routes import chat, dedup, demo, health, ingest, jobs, logs, memo, reembed, retrieve, search, think

ROUTERS = [
    health.router,
    jobs.router,
    demo.router,
    ingest.router,
    dedup.router,
    reembed.router,
    search.router,
    chat.router,
    retrieve.router,
    think.router,
    memo.router,
    logs.router,
]
