"""Flower's entry point with its monitoring endpoints behind its own auth.

Flower 2.2 checks credentials only in handlers marked `@web.authenticated`; `/metrics` (task
names, worker hostnames, runtimes) and `/healthcheck` answer anyone. With basic auth configured
(FLOWER_BASIC_AUTH, which `yana up` / `yana flower` set from AUTH_TOKENS when AUTH_ENABLED), this
makes both answer 401 without valid credentials like every other Flower page, then runs
`celery ... flower` as usual. The credentials come through the environment, never the command
line, so they are not visible in `ps`.
"""

from __future__ import annotations

import os
import sys

from yana import INSTANCE_HEADER


def guard_monitor_endpoints() -> None:
    import tornado.web
    from flower.views import monitor

    for handler in (monitor.Metrics, monitor.Healthcheck):
        if getattr(handler, "_yana_guarded", False):
            continue
        original = handler.get

        async def get(self, _original=original):
            options = self.application.options
            if (options.basic_auth or options.auth) and not self.get_current_user():
                raise tornado.web.HTTPError(401)
            return await _original(self)

        handler.get = get
        handler._yana_guarded = True


def answer_instance() -> None:
    """/healthcheck answers with YANA_INSTANCE in INSTANCE_HEADER (set by `yana up`), so its
    health check cannot be answered by another instance's Flower on the same port."""
    instance = os.environ.get("YANA_INSTANCE")
    if not instance:
        return
    from flower.views import monitor

    original = monitor.Healthcheck.get

    async def get(self, _original=original):
        self.set_header(INSTANCE_HEADER, instance)
        return await _original(self)

    monitor.Healthcheck.get = get


def main() -> None:
    guard_monitor_endpoints()
    answer_instance()
    from celery.__main__ import main as celery_main

    sys.argv[0] = "celery"
    sys.exit(celery_main())


if __name__ == "__main__":
    main()
