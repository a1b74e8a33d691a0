"""Every route of the real app follows the route rules (explicit operation_id = MCP tool name,
tags, an Envelope response model) and documents its contract in a valid OpenAPI document."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from openapi_spec_validator import validate

from api.contract.mcp import BINARY_OPERATIONS
from api.contract.routing import RouteIndex
from api.schemas import Envelope
from tests.api.contract_support import build_app
from yana.settings import get_settings


@pytest.fixture(scope="module")
def app():
    return build_app(with_probes=False)


@pytest.fixture(scope="module")
def schema(app):
    return app.openapi()


def _api_routes(app):
    return [
        rc for rc in iter_route_contexts(app.routes) if isinstance(rc.original_route, APIRoute) and rc.include_in_schema
    ]


def test_every_route_has_operation_id_tags_and_an_envelope_model(app):
    routes = _api_routes(app)
    assert len(routes) >= 8
    seen = set()
    for rc in routes:
        where = f"{sorted(rc.methods)} {rc.path_format}"
        assert rc.original_route.operation_id, f"{where}: no explicit operation_id"
        assert rc.operation_id not in seen, f"{where}: operation_id {rc.operation_id} used twice"
        seen.add(rc.operation_id)
        assert rc.tags, f"{where}: no tags"
        if rc.operation_id in BINARY_OPERATIONS:  # bytes (an image), documented as such
            content = app.openapi()["paths"][rc.path_format]["get"]["responses"]["200"]["content"]
            assert content and "application/json" not in content, f"{where}: {list(content)}"
            continue
        model = rc.response_model
        assert model is not None, f"{where}: no response_model"
        assert isinstance(model, type) and issubclass(model, Envelope), f"{where}: {model} is not an Envelope"


def test_document_is_valid_openapi(schema):
    validate(schema)


def test_every_operation_documents_its_error_statuses(app, schema):
    index = RouteIndex(app, get_settings())
    ops = 0
    for rc in index.routes():
        if not isinstance(rc.original_route, APIRoute) or not rc.include_in_schema:
            continue
        rp = index.policy_of(rc)
        for method in rc.methods:
            op = schema["paths"][rc.path_format][method.lower()]
            ops += 1
            codes = set(op["responses"])
            expected = {"400", "500", "503", "504"}
            if not rp.policy.public:
                expected |= {"401", "429"}
                assert op["security"] == [{"bearerAuth": []}]
            else:  # open: no token, no rate limit
                assert "security" not in op and not {"401", "429"} & set(op["responses"]), op["operationId"]
            if "requestBody" in op:
                expected |= {"413", "415"}
            if rp.timeout(get_settings()):
                expected.add("408")
            if rp.idempotent:
                expected |= {"409", "422"}
                assert any(p.get("name") == "Idempotency-Key" for p in op["parameters"])
            assert expected <= codes, f"{op['operationId']}: missing {sorted(expected - codes)}"
            for code, resp in op["responses"].items():
                assert "X-Run-Id" in resp["headers"] and "traceparent" in resp["headers"], (op["operationId"], code)
                if int(code) >= 400:
                    assert resp["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/ErrorResponse"
                    }, (op["operationId"], code)
            assert op["responses"]["429"]["headers"]["Retry-After"] if "429" in codes else True
    assert ops >= 8
    assert "HTTPValidationError" not in str(schema)
    assert schema["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["bearerAuth"]["description"],
    }


def test_texts_speak_to_users_and_every_query_parameter_is_described(schema):
    import json

    assert "seed" not in json.dumps(schema, ensure_ascii=False).lower()
    for item in schema["paths"].values():
        for op in item.values():
            for param in op.get("parameters", []):
                if param.get("in") == "query":
                    assert param.get("description"), (op["operationId"], param["name"])


def test_job_creating_posts_take_an_idempotency_key(schema):
    op = schema["paths"]["/v1/demo/sleep"]["post"]
    assert op["x-yana-contract"]["idempotent"] is True
    assert {"409", "422"} <= set(op["responses"])


def test_mcp_tools_are_the_operations(app, schema):
    op_ids = {op["operationId"] for item in schema["paths"].values() for op in item.values()}
    tools = {t.name for t in app.state.mcp.tools}
    assert tools == op_ids and set(BINARY_OPERATIONS) <= op_ids  # every operation, label_image included
