"""Shared fixtures: one private real stack per test session (see tests/stack.py)."""

from __future__ import annotations

import os

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from tests.stack import TestStack, start_stack  # noqa: E402


def _point_process_at(stack: TestStack) -> None:
    """Make in-process code (pipelines called from tests) use the stack's stores."""
    from yana import clients
    from yana.settings import get_settings

    for key in ("REDIS_URL", "CHROMA_URL", "DATA_DIR", "WEBHOOK_ALLOW", "HEARTBEAT_TTL_S", "HEARTBEAT_INTERVAL_S"):
        if key in stack.env:
            os.environ[key] = stack.env[key]
    get_settings.cache_clear()
    clients._redis.cache_clear()
    clients._chroma.cache_clear()


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> TestStack:
    s = start_stack(tmp_path_factory.mktemp("stack"))
    _point_process_at(s)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def redis_url(stack) -> str:
    return stack.redis_url


@pytest.fixture(scope="session")
def chroma_url(stack) -> str:
    return stack.chroma_url


@pytest.fixture()
def redis_client(stack):
    import redis

    return redis.Redis.from_url(stack.redis_url, decode_responses=True)


@pytest.fixture(scope="session")
def api(stack) -> httpx.Client:
    with httpx.Client(base_url=stack.api_url, timeout=60) as client:
        yield client
