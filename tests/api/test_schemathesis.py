"""Property-based run over the OpenAPI document (offline, bounded): no 5xx, and every status the
API answers is one the document declares for that operation.

The app is served for real on loopback with its own Redis database and its own Chroma and data
folder, so generated ingests and re-embeds only queue (no worker listens there) and nothing the
fuzzer writes reaches the shared test stack.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import status_code_conformance

from cli import processes
from tests.api.contract_support import contract_server

# Examples per operation and generation mode; CI raises it (.ci/run).
MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "20"))
CLIENT_TIMEOUT_S = 75


@pytest.fixture(scope="module")
def api_schema(stack, tmp_path_factory):
    data = tmp_path_factory.mktemp("schemathesis")
    chroma = processes.start_chroma(data / "chroma", processes.free_port(), data / "logs", stack.env)
    try:
        processes.wait_healthy(chroma, timeout_s=60)
        isolated_redis = stack.redis_url.rsplit("/", 1)[0] + "/3"
        with contract_server(
            with_probes=False,
            REDIS_URL=isolated_redis,
            CHROMA_URL=chroma.url,
            DATA_DIR=str(data),
            OPENAI_BASE_URL="",
            RATE_LIMIT="100000/second",
            RATE_BURST="1000000",
            AUTH_ENABLED="false",
        ) as client:
            yield schemathesis.openapi.from_url(f"{client.base_url}/openapi.json")
    finally:
        processes.stop([chroma])


def no_server_error_but_a_declared_outage(ctx, response, case):
    """`not_a_server_error`, except the contract's own answer for a dependency that did not answer
    in time (503 UPSTREAM_UNAVAILABLE, retryable): on a starved machine the health check's Redis
    probe can run past its 1.5 s, and saying so is the documented behaviour, not a server error.
    `status_code_conformance` still requires 503 to be declared for the operation."""
    if response.status_code == 503:
        try:
            error = response.json()["error"]
        except (ValueError, KeyError, TypeError):
            error = None
        if isinstance(error, dict) and error.get("code") == "UPSTREAM_UNAVAILABLE" and error.get("retryable") is True:
            return None
    return not_a_server_error(ctx, response, case)


def _run(operation, mode: GenerationMode) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case):
        # The client waits longer than any route's own time limit (60 s at most; the route answers
        # 408 then, a declared status): a slow answer on a loaded machine is not a conformance
        # failure, and a client giving up first (30 s here before) made a passing case "flaky".
        case.call_and_validate(
            checks=[no_server_error_but_a_declared_outage, status_code_conformance], timeout=CLIENT_TIMEOUT_S
        )

    check()


def test_api_conforms_to_its_openapi_document(api_schema):
    # One hypothesis run per operation and mode (schemathesis' lazy pytest loader does not
    # support this pytest version); failures are collected so one report names them all.
    failures = []
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 8
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _run(operation, mode)
            except Exception as exc:  # noqa: BLE001 - reported below with the operation
                # hypothesis' flaky-failure groups name their cause only in their sub-exceptions
                inner = [f"{type(e).__name__}: {e}"[:2000] for e in getattr(exc, "exceptions", ())]
                failures.append(f"{operation.label} [{mode.value}]: {exc}" + "".join(f"\n  - {i}" for i in inner))
    assert not failures, "\n\n".join(failures)
