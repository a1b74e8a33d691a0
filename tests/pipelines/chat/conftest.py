"""Fixtures of the chat pipeline tests: the OpenAI-compatible stub server and a ChatDeps factory."""

from __future__ import annotations

import uuid

import pytest
import redis

from pipelines.chat.nodes import ChatDeps
from pipelines.chat.service import build_breaker, build_llm
from pipelines.chat.sessions import SessionStore
from tests.pipelines.chat.openai_stub import OpenAIStub
from yana.settings import Settings

HITS = [
    {
        "id": "label_1",
        "brand_name": "北の誉",
        "product_name": "純米吟醸",
        "brewery": "北の誉酒造",
        "region": "小樽",
        "label_features": ["辛口", "フルーティー"],
        "file_path": "data/images/a.png",
        "score": 0.9,
        "category": "sake",
    },
    {
        "id": "label_2",
        "brand_name": "田酒",
        "product_name": "特別純米",
        "brewery": "西田酒造店",
        "region": "青森",
        "label_features": ["旨口"],
        "file_path": "data/images/b.png",
        "score": 0.8,
        "category": "sake",
    },
    {
        "id": "label_3",
        "brand_name": "りんごの詩",
        "product_name": "ストレート果汁",
        "brewery": "青森りんご園",
        "region": "弘前",
        "label_features": ["無添加"],
        "file_path": "data/images/c.png",
        "score": 0.5,
        "category": "juice",
    },
]


@pytest.fixture(scope="module")
def openai_stub():
    stub = OpenAIStub().start()
    yield stub
    stub.stop()


@pytest.fixture()
def stub(openai_stub):
    openai_stub.clear()
    yield openai_stub
    openai_stub.clear()


class FakeRetriever:
    """Stands in for pipelines.search.service in graph tests (the real one has its own tests and the API
    end-to-end tests); records what it was asked."""

    def __init__(self, hits=None, error: Exception | None = None, delay_s: float = 0.0):
        self.hits = HITS if hits is None else hits
        self.error = error
        self.delay_s = delay_s
        self.calls: list[tuple] = []

    def __call__(self, query, filters, k):
        import time

        self.calls.append((query, filters, k))
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.error:
            raise self.error
        return [dict(h) for h in self.hits[:k]]


@pytest.fixture()
def make_deps(redis_url, tmp_path):
    """make_deps(stub=None, retrieve=FakeRetriever(), **settings) -> ChatDeps on the stack's Redis.
    Every call gets its own model name, so its circuit breaker (keyed by endpoint+model) is fresh."""

    def make(stub: OpenAIStub | None = None, retrieve=None, **overrides) -> ChatDeps:
        s = Settings(
            redis_url=redis_url,
            data_dir=tmp_path,
            openai_base_url=stub.base_url if stub else None,
            openai_api_key=None,
            openai_model=f"stub-{uuid.uuid4().hex[:8]}",
            **overrides,
        )
        r = redis.Redis.from_url(redis_url, decode_responses=True)
        return ChatDeps(
            settings=s,
            retrieve=FakeRetriever() if retrieve is None else retrieve,
            llm=build_llm(s),
            breaker=build_breaker(s),
            sessions=SessionStore(r, ttl_s=s.chat_session_ttl_s, max_turns=s.chat_session_max_turns),
        )

    return make
