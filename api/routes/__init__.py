"""Every feature's router, in one list that api.main includes."""

from api.routes import chat, dedup, demo, health, ingest, jobs, labels, logs, memo, reembed, retrieve, search, think

ROUTERS = [
    health.router,
    jobs.router,
    jobs.queues_router,
    demo.router,
    ingest.router,
    dedup.router,
    reembed.router,
    search.router,
    labels.router,
    chat.router,
    retrieve.router,
    think.router,
    memo.router,
    logs.router,
]
