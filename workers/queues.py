"""Queue names and worker liveness keys, importable without creating the Celery app (the
supervisor and tests need them before the environment points at the right Redis)."""

# One queue per job family, so operators can scale ingest separately from webhooks.
QUEUES = ("default", "ingest", "ocr", "reembed", "retrieve", "think", "webhooks")

# Set by each worker's maintenance loop with a TTL: liveness for `yana up`, tests, /v1/healthz and
# the reconciler (a queued job whose message a dead worker main had reserved is sent again).
WORKER_KEY = "yana:workers:{}"


def worker_key(pid: int, host: str | None = None) -> str:
    """The liveness key of the worker main process `pid` on `host` (default: this machine); the
    host is part of it so that workers on several machines never share one."""
    import socket

    return WORKER_KEY.format(f"{host or socket.gethostname()}:{pid}")


def queue_lists(queue: str) -> list[str]:
    """The lists Celery's Redis transport keeps one queue's waiting messages in (one per priority
    step)."""
    from kombu.transport.redis import Channel

    return [queue if not pri else f"{queue}{Channel.sep}{pri}" for pri in Channel.priority_steps]


def broker_message_keys() -> tuple[list[str], str, str]:
    """Where Celery's Redis transport keeps messages: the list of each queue at each priority
    step (waiting), the hash of messages taken by a worker and not yet acknowledged, and the zset
    of when each of those was taken."""
    from kombu.transport.redis import Channel

    lists = [key for q in QUEUES for key in queue_lists(q)]
    return lists, Channel.unacked_key, Channel.unacked_index_key
