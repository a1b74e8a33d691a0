"""Collections per embedding model, the active alias in Redis, and writes into Chroma.

Naming: ``labels__<model-slug>__<dim>__v<N>``; the collection's metadata records ``model`` and
``dim``, and every write is checked against them, so vectors of two models never share a
collection. ``yana:collection:active`` (Redis) names the collection search reads and ingest writes;
a re-embed builds ``v<N+1>`` for its model and swaps the alias with a compare-and-set.

Writes always pass embeddings: Chroma given bare text would fetch its own ONNX model (offline:
failure). Collections are opened with ``embedding_function=None`` for the same reason.
Each upsert/delete is mirrored into the lexical index (pipelines.search.lexical) of the same collection.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import numpy as np

from pipelines.embedding.backends import canonical_model_name, get_embedder, resolve_default_model
from pipelines.labels import schema as labels
from pipelines.search import lexical
from pipelines.search.keys import ACTIVE_ALIAS_KEY, BUILDING_JOB_KEY, BUILDING_KEY  # noqa: F401 - re-exported
from yana.errors import ErrorCode, YanaError, conflict, not_found

log = logging.getLogger("yana.vector_index")


COLLECTION_PREFIX = "labels"
_NAME_RE = re.compile(r"^labels__(?P<slug>.+)__(?P<dim>\d+)__v(?P<version>\d+)$")

# Compare-and-set the alias: only moves when it still names what the caller expects.
_SWAP = """
local cur = redis.call('GET', KEYS[1])
if (cur or '') ~= ARGV[1] then return {0, cur or ''} end
redis.call('SET', KEYS[1], ARGV[2])
return {1, ARGV[2]}
"""


def model_slug(model: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", canonical_model_name(model).lower()).strip("-")
    return slug[:180] or "model"


def collection_name(model: str, dim: int, version: int = 1) -> str:
    return f"{COLLECTION_PREFIX}__{model_slug(model)}__{int(dim)}__v{int(version)}"


def parse_collection_name(name: str) -> dict | None:
    m = _NAME_RE.match(name)
    return {"slug": m["slug"], "dim": int(m["dim"]), "version": int(m["version"])} if m else None


def open_collection(chroma, name: str):
    try:
        return chroma.get_collection(name, embedding_function=None)
    except (httpx.TimeoutException, httpx.TransportError):
        raise  # Chroma slow or away: not a missing collection (the job retries)
    except Exception as exc:  # chromadb raises NotFoundError / ValueError depending on client
        raise not_found(f"collection {name!r} does not exist") from exc


def create_collection(chroma, name: str, model: str, dim: int):
    """Create (or open) a collection recording its model and dimension."""
    col = chroma.get_or_create_collection(
        name,
        metadata={"model": canonical_model_name(model), "dim": int(dim)},
        configuration={"hnsw": {"space": "cosine"}},
        embedding_function=None,
    )
    got_model, got_dim = collection_model(col)
    if got_model != canonical_model_name(model) or got_dim != int(dim):
        raise YanaError.of(
            ErrorCode.MODEL_MISMATCH, f"collection {name!r} holds {got_model}/{got_dim}, not {model}/{dim}"
        )
    return col


def collection_model(col) -> tuple[str, int]:
    md = col.metadata or {}
    if "model" not in md or "dim" not in md:
        raise YanaError.of(ErrorCode.MODEL_MISMATCH, f"collection {col.name!r} records no model/dim")
    return str(md["model"]), int(md["dim"])


def active_name(r) -> str | None:
    return r.get(ACTIVE_ALIAS_KEY)


def active_collection(chroma, r) -> tuple[Any, str]:
    """(collection, model_name) that search reads and ingest writes; creates the default on first use."""
    name = active_name(r)
    if not name:
        model = resolve_default_model(r)
        dim = get_embedder(model).dim
        name = collection_name(model, dim, 1)
        create_collection(chroma, name, model, dim)
        r.set(ACTIVE_ALIAS_KEY, name, nx=True)
        name = active_name(r) or name  # another process may have set it first
    col = open_collection(chroma, name)
    return col, collection_model(col)[0]


def swap_active(r, expected: str | None, new: str) -> bool:
    """Point the alias at `new` if it still names `expected` (atomic)."""
    ok, _cur = r.eval(_SWAP, 1, ACTIVE_ALIAS_KEY, expected or "", new)
    return bool(int(ok))


def list_collections(chroma, r) -> list[dict]:
    active = active_name(r)
    out = []
    for c in chroma.list_collections():
        name = c if isinstance(c, str) else c.name
        if not name.startswith(COLLECTION_PREFIX + "__"):
            continue
        col = open_collection(chroma, name)
        md = col.metadata or {}
        out.append(
            {
                "name": name,
                "model": md.get("model"),
                "dim": md.get("dim"),
                "count": col.count(),
                "active": name == active,
            }
        )
    return sorted(out, key=lambda c: c["name"])


def drop_collection(chroma, r, name: str) -> None:
    if name == active_name(r):
        raise conflict(f"{name!r} is the active collection; re-embed or swap first")
    open_collection(chroma, name)
    chroma.delete_collection(name)
    _lexical_drop(r, name)


def _check_vectors(col, chunks: list[dict], model: str | None) -> np.ndarray:
    col_model, col_dim = collection_model(col)
    if model is not None and canonical_model_name(model) != col_model:
        raise YanaError.of(ErrorCode.MODEL_MISMATCH, f"vectors of {model} cannot go into {col.name} ({col_model})")
    emb = np.asarray([c["embedding"] for c in chunks], dtype=np.float32)
    if emb.ndim != 2 or emb.shape[1] != col_dim:
        raise YanaError.of(ErrorCode.MODEL_MISMATCH, f"{col.name} holds {col_dim}-d vectors, got shape {emb.shape}")
    return emb


def upsert_chunks(col, chunks: list[dict], *, r=None, model: str | None = None) -> int:
    """Upsert chunks {id, text, metadata, embedding} and mirror them into the lexical index."""
    if not chunks:
        return 0
    emb = _check_vectors(col, chunks, model)
    metas = [labels.to_metadata(c["metadata"]) for c in chunks]
    col.upsert(ids=[c["id"] for c in chunks], documents=[c["text"] for c in chunks], metadatas=metas, embeddings=emb)
    if r is not None:
        lexical.index_chunks(
            r,
            col.name,
            [
                {"id": c["id"], "text": c["text"], "metadata": m, "embedding": e}
                for c, m, e in zip(chunks, metas, emb, strict=True)
            ],
        )
    return len(chunks)


def delete_chunks(col, ids: list[str], *, r=None) -> None:
    if not ids:
        return
    col.delete(ids=list(ids))
    if r is not None:
        lexical.remove_chunks(r, col.name, list(ids))


def _lexical_drop(r, name: str) -> None:
    lexical.drop_collection(r, name)
