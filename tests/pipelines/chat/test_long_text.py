"""A chat turn longer than a search query still retrieves: the query is cut, not rejected."""

from __future__ import annotations

import asyncio

from pipelines.chat.graph import ChatInput, run_chat
from pipelines.chat.nodes import retrieval_query
from pipelines.search.service import QUERY_MAX_CHARS
from tests.pipelines.chat.api_support import ingest_labels
from tests.pipelines.chat.conftest import FakeRetriever
from tests.stack import wait_for
from yana.settings import Settings


class StrictRetriever(FakeRetriever):
    """Refuses what the real search refuses: a query over QUERY_MAX_CHARS."""

    def __call__(self, query, filters, k):
        if len(query) > QUERY_MAX_CHARS:
            raise ValueError("query_text is too long")
        return super().__call__(query, filters, k)


def test_retrieval_query_keeps_the_end_of_a_long_message():
    text = "前置き。" * 400 + "田酒ってどんな酒？"
    q = retrieval_query(text)
    assert len(q) <= QUERY_MAX_CHARS and q.endswith("田酒ってどんな酒？")
    assert len(retrieval_query(text, 200)) <= 200 and retrieval_query(text, 5000) == q
    assert retrieval_query("小樽のお酒") == "小樽のお酒"


def test_long_turn_is_retrieved_with_a_cut_query(make_deps):
    retriever = StrictRetriever()
    out = asyncio.run(run_chat(ChatInput("ええと、" * 500 + "小樽のおすすめある？"), make_deps(retrieve=retriever)))
    assert "rag_unavailable" not in out.warnings and out.hits
    assert len(retriever.calls) == 1
    assert len(retriever.calls[0][0]) <= min(QUERY_MAX_CHARS, Settings().chat_retrieval_query_chars)


def test_api_chat_with_4000_characters_uses_the_label_store(api):
    ids = ingest_labels(api)
    text = ("ええと、今日はちょっと長い話になるんやけど聞いてな。" * 160)[:3990] + "田酒ってどんな酒？"
    assert 1000 < len(text) <= 4000
    # the API's first searches load the query model: wait until a short turn retrieves
    wait_for(
        lambda: (
            "rag_unavailable" not in api.post("/v1/chat", json={"user_text": "田酒ってどんな酒？"}).json()["warnings"]
        ),
        timeout_s=60,
        what="a short chat turn that retrieves",
    )
    r = api.post("/v1/chat", json={"user_text": text, "top_k": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert "rag_unavailable" not in body["warnings"], body["warnings"]
    # The question at the end of the long turn is what was searched: the hits are 田酒 labels (the
    # shared test stack may hold other 田酒 labels other tests ingested, ranked beside this one).
    assert body["hits"] and body["hits"][0]["brand_name"] == "田酒", body["hits"]
    assert ids["田酒"] in [h["id"] for h in api.post("/v1/search", json={"query_text": "田酒", "k": 10}).json()["hits"]]
