"""LangChain retrievers over yana: `YanaRetriever` (/v1/retrieve with inline documents) and
`YanaSearchRetriever` (/v1/search over the stored corpus). Needs the `langchain` extra."""

from __future__ import annotations

from typing import Any

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise ImportError(
        "clients.langchain needs langchain-core: pip install 'yana[langchain]' (or langchain-core)"
    ) from exc

from clients.retrieve import RetrieveClient


def _client(base_url: str, timeout: float, token: str | None) -> RetrieveClient:
    return RetrieveClient(base_url, timeout=timeout, token=token)


class YanaRetriever(BaseRetriever):
    """Best passages of `documents` (dicts {id, text, metadata} or LangChain Documents).
    `passage`: what page_content is — "chunk" (the server's default: the chunk holding the
    evidence, grown to whole sentences), "window" (up to three sentences) or "document"; the
    evidence's byte ranges inside it are metadata["spans"]."""

    base_url: str
    documents: list[Any]
    timeout: float = 30.0
    token: str | None = None
    options: dict = {}
    passage: str | None = None

    def _docs(self) -> list[dict]:
        out = []
        for i, d in enumerate(self.documents):
            if isinstance(d, Document):
                out.append(
                    {"id": str(d.id or d.metadata.get("id") or i), "text": d.page_content, "metadata": d.metadata}
                )
            else:
                out.append(d)
        return out

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        body = _client(self.base_url, self.timeout, self.token).retrieve(
            query, self._docs(), self.options or None, passage=self.passage
        )
        return [
            Document(
                page_content=r["text"],
                id=r["doc_id"],
                metadata={**(r.get("metadata") or {}), "doc_id": r["doc_id"], "score": r["score"], "spans": r["spans"]},
            )
            for r in body["results"]
        ]


class YanaSearchRetriever(BaseRetriever):
    """Hits of /v1/search over the stored corpus, one Document per hit (its fields as metadata)."""

    base_url: str
    k: int = 5
    filters: dict | None = None
    timeout: float = 30.0
    token: str | None = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        body = _client(self.base_url, self.timeout, self.token).search(query, k=self.k, filters=self.filters)
        out = []
        for hit in body["hits"]:
            text = " ".join(str(hit.get(f) or "") for f in ("brand_name", "product_name", "brewery", "region")).strip()
            out.append(Document(page_content=hit.get("text") or text, id=hit["id"], metadata=dict(hit)))
        return out
