"""LlamaIndex retrievers over yana, returning NodeWithScore: `YanaRetriever` (/v1/retrieve with
inline documents) and `YanaSearchRetriever` (/v1/search over the stored corpus). Needs the
`llamaindex` extra."""

from __future__ import annotations

from typing import Any

try:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise ImportError(
        "clients.llamaindex needs llama-index-core: pip install 'yana[llamaindex]' (or llama-index-core)"
    ) from exc

from clients.retrieve import RetrieveClient


class YanaRetriever(BaseRetriever):
    """Best passages of `documents` (dicts {id, text, metadata} or LlamaIndex Documents/TextNodes).
    `passage`: what a node's text is — "chunk" (the server's default: the chunk holding the
    evidence, grown to whole sentences), "window" (up to three sentences) or "document"; the
    evidence's byte ranges inside it are metadata["spans"]."""

    def __init__(
        self,
        base_url: str,
        documents: list[Any],
        *,
        options: dict | None = None,
        timeout: float = 30.0,
        token=None,
        passage: str | None = None,
    ):
        super().__init__()
        self._client = RetrieveClient(base_url, timeout=timeout, token=token)
        self._documents = documents
        self._options = options
        self._passage = passage

    def _docs(self) -> list[dict]:
        out = []
        for d in self._documents:
            if isinstance(d, dict):
                out.append(d)
            else:  # a llama_index Document / TextNode
                out.append({"id": d.id_, "text": d.get_content(), "metadata": dict(d.metadata)})
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        body = self._client.retrieve(query_bundle.query_str, self._docs(), self._options, passage=self._passage)
        return [
            NodeWithScore(
                node=TextNode(
                    text=r["text"],
                    metadata={**(r.get("metadata") or {}), "doc_id": r["doc_id"], "spans": r["spans"]},
                ),
                score=r["score"],
            )
            for r in body["results"]
        ]


class YanaSearchRetriever(BaseRetriever):
    """Hits of /v1/search over the stored corpus."""

    def __init__(self, base_url: str, *, k: int = 5, filters: dict | None = None, timeout: float = 30.0, token=None):
        super().__init__()
        self._client = RetrieveClient(base_url, timeout=timeout, token=token)
        self._k, self._filters = k, filters

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        body = self._client.search(query_bundle.query_str, k=self._k, filters=self._filters)
        out = []
        for hit in body["hits"]:
            text = " ".join(str(hit.get(f) or "") for f in ("brand_name", "product_name", "brewery", "region")).strip()
            out.append(
                NodeWithScore(
                    node=TextNode(id_=hit["id"], text=hit.get("text") or text, metadata=dict(hit)), score=hit["score"]
                )
            )
        return out
