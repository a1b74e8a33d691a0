"""The Redis layout of ingest: the only module that spells its keys.

yana:ingest:{job_id}:items   hash: item index -> the item's outcome JSON (TTL JOB_RETENTION_S)
yana:ingest:{job_id}:retry   hash: "ingest" -> the job re-running that job's failed items
yana:read:{sha1}             string: an image's reading and extracted fields (TTL 30 days)
yana:read:lock:{sha1}        string: held by the process reading those bytes (TTL the read timeout)
yana:label:corrections       hash: label id -> JSON {field: {value, source, confidence, at}}
yana:label:lock:{label_id}   string: one correction of a label at a time
yana:label:images            hash: label id -> blob key of its image (pipelines.labels.schema, read by search)
yana:read:deferred           zset: label id -> when its deferred read is due (pipelines.ingest.deferred)
yana:ingest:active           string: set by every ingest batch with a TTL (deferred reads wait for it to lapse)
yana:read:deferred:failures  hash: label id -> failed deferred reads so far (cleared when done)
"""

OUTCOMES_KEY = "yana:ingest:{job_id}:items"
RETRY_KEY = "yana:ingest:{job_id}:retry"
READING_KEY = "yana:read:{sha1}"
READING_LOCK_KEY = "yana:read:lock:{sha1}"
CORRECTIONS_KEY = "yana:label:corrections"
LABEL_LOCK_KEY = "yana:label:lock:{label_id}"
DEFERRED_READS_KEY = "yana:read:deferred"
INGEST_ACTIVE_KEY = "yana:ingest:active"
DEFERRED_FAILURES_KEY = "yana:read:deferred:failures"
