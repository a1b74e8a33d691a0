"""Shared fixtures: one private real stack per test session (see tests/stack.py), and the test tiers.

Tiers: a test that uses the `stack` fixture (directly or through another fixture), or is marked
`stack` because it starts processes of its own, is in the stack tier; every other test is marked
`unit` here and runs with `pytest -m unit` without Redis, Chroma or a worker.
"""

from __future__ import annotations

import os
import tempfile

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
# The int8 embedding model is built from bundled weights on first use (20-60 s): once per machine
# for every stack the tests start, not once per temporary data folder.
os.environ.setdefault("MODELS_DIR", os.path.join(tempfile.gettempdir(), "yana-test-models"))
# Until a fixture points the process at a private stack, any store access fails fast instead of
# reaching a Redis or Chroma that happens to run on this machine's default ports.
os.environ["REDIS_URL"] = "redis://127.0.0.1:9/0"
os.environ["CHROMA_URL"] = "http://127.0.0.1:9"

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
    clients._blobs.cache_clear()
    # Celery reads its broker URL when the app is created: if something imported it before this
    # point, re-point it, so nothing a test sends in-process reaches another Redis.
    import sys

    celery_mod = sys.modules.get("workers.celery_app")
    if celery_mod is not None:
        celery_mod.app.conf.update(broker_url=stack.redis_url, result_backend=stack.redis_url)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "stack" not in item.fixturenames and item.get_closest_marker("stack") is None:
            item.add_marker(pytest.mark.unit)
    # The benches' tests last: they only collect runs started at collection (tests/test_benches.py),
    # so by then the runs are done, and no xdist worker sits waiting on one while tests are queued.
    items.sort(key=lambda item: getattr(item, "originalname", "") == "test_bench_runs_at_a_tiny_size")


def pytest_collection_finish(session):
    """The benches' tiny runs start now, beside the rest of the session (tests/test_benches.py)."""
    from tests import test_benches

    scripts = test_benches.selected_scripts(session.items)
    if scripts and not session.config.option.collectonly:
        runs, results = test_benches.start(session.config, scripts)
        session.config.stash[test_benches.BENCH_RUNS] = runs
        session.config.stash[test_benches.BENCH_RESULTS] = results


def pytest_sessionfinish(session, exitstatus):
    from tests import test_benches

    runs = session.config.stash.get(test_benches.BENCH_RUNS, None)
    if runs is not None:
        # an xdist worker done with its own tests lets the runs finish: another may be waiting on them
        shared = hasattr(session.config, "workerinput") and exitstatus != pytest.ExitCode.INTERRUPTED
        runs.stop(wait=shared)


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
