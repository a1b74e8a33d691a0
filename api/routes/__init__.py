"""Every feature's router, in one list that api.main includes."""

from api.routes import chat, demo, health, ingest, jobs, reembed, search

ROUTERS = [health.router, jobs.router, demo.router, ingest.router, reembed.router, search.router, chat.router]
