"""The worker's consumer: Celery's own, reconnecting to the broker sooner after it went away.

Kombu retries a lost broker connection after 2, 4, 6, 8... s (attempts at 0, 2, 6, 12, 20, 30 s):
a Redis that `yana up` restarts in a few seconds was reached again only 12-20 s later, and the
fault run's worst recovery after a Redis kill was ~30 s. Here the retries come every 0.5 s, then
at most every 2 s (a reconnect attempt is one TCP connect to Redis: cheap)."""

from __future__ import annotations

from celery.worker.consumer import Consumer

RETRY = {"interval_start": 0.5, "interval_step": 0.5, "interval_max": 2.0}


class FastReconnectConsumer(Consumer):
    def ensure_connected(self, conn):
        original = conn.ensure_connection

        def ensure_connection(*args, **kwargs):
            for k, v in RETRY.items():
                kwargs.setdefault(k, v)
            return original(*args, **kwargs)

        conn.ensure_connection = ensure_connection
        return super().ensure_connected(conn)
