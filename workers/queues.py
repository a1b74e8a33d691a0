"""Queue names, importable without creating the Celery app (the supervisor and tests need them
before the environment points at the right Redis)."""

# One queue per job family, so operators can scale ingest separately from webhooks.
QUEUES = ("default", "ingest", "reembed", "retrieve", "think", "webhooks")
