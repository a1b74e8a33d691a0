"""Queue names and worker liveness keys, importable without creating the Celery app (the
supervisor and tests need them before the environment points at the right Redis)."""

# One queue per job family, so operators can scale ingest separately from webhooks.
QUEUES = ("default", "ingest", "reembed", "retrieve", "think", "webhooks")

# Set by each worker's maintenance loop with a TTL: liveness for `yana up`, tests and /v1/healthz.
WORKER_KEY = "yana:workers:{}"
