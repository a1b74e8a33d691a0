"""POST /agent/librarian/think: one stateless step over the real stack (seed 004)."""

from __future__ import annotations

import httpx
import pytest

from tests.api.think_support import drop_world, execute, make_world, step_body


@pytest.fixture(scope="module")
def world(stack):
    w = make_world()
    yield w
    drop_world(w)


@pytest.fixture(scope="module")
def apis(stack):
    """Two API processes of their own (the loops here make many calls: no rate limit in the way)."""
    env = {"RATE_LIMIT": "10000/second", "RATE_BURST": "10000"}
    a, b = stack.start_api(name="api-think-a", **env), stack.start_api(name="api-think-b", **env)
    with httpx.Client(base_url=a.url, timeout=60) as ca, httpx.Client(base_url=b.url, timeout=60) as cb:
        yield ca, cb


@pytest.fixture(scope="module")
def api(apis):
    return apis[0]


def _step(api, body) -> dict:
    resp = api.post("/agent/librarian/think", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _loop(client, world, question, *, max_rounds=5, **kw) -> tuple[dict, list[dict]]:
    """Drive steps like a caller: execute each SEARCH, send history + state back."""
    body = step_body(world, question, **kw)
    history: list[dict] = []
    steps = []
    for _ in range(max_rounds):
        out = _step(client, {**body, "search_history": history, "state": steps[-1]["state"] if steps else None})
        steps.append(out)
        if out["action"] != "SEARCH":
            return out, steps
        history.append(execute(client, out))
    raise AssertionError(f"no end after {max_rounds} steps: {steps[-1]}")


def test_first_step_plans_one_search_per_aspect_with_the_subject_filter(api, world):
    q = f"{world['north']}と{world['south']}の辛口を比べたい"
    out = _step(api, step_body(world, q, request_id="req-first"))
    assert out["action"] == "SEARCH" and out["round"] == 0 and out["max_loops"] == 3
    assert out["request_id"] == "req-first" and out["state"] and out["run_id"]
    assert "evidence" not in out and "error_type" not in out  # only the SEARCH fields
    assert [a["label"] for a in out["aspects"]] == [f"{world['north']}×辛口×日本酒", f"{world['south']}×辛口×日本酒"]
    assert len(out["queries_text"]) == 2 and len(out["queries_vector"]) == 2
    assert out["filters_hint"] == {"subject_id": "sake", "category": ["sake"]}
    assert {s["filters"]["region"][0] for s in out["searches"]} == {world["north"], world["south"]}
    assert all(s["filters"]["category"] == ["sake"] for s in out["searches"])
    assert out["rationale"]


def test_search_then_complete_with_the_smallest_deduplicated_evidence(api, world):
    q = f"{world['north']}と{world['south']}の辛口を比べたい"
    out, steps = _loop(api, world, q)
    assert out["action"] == "COMPLETE", out
    assert len(steps) == 2  # one round was enough
    ids = {e["document_id"] for e in out["evidence"]}
    # one dry label per region; the re-upload of the northern one is not a second item
    assert len(ids) == 2 and world["ids"]["s_dry"] in ids
    assert ids & {world["ids"]["n_dry"], world["ids"]["n_dry_copy"]}
    for e in out["evidence"]:
        assert e["why_relevant"] and e["snippets"] and e["aspects"]
    assert world["north"] in out["coverage_notes"] and world["south"] in out["coverage_notes"]
    assert out["missing"] == []


def test_a_gap_is_searched_again_with_rewritten_queries_then_named_as_missing(api, world):
    # nothing in the south is sweet: three rounds, then COMPLETE with what exists and the gap named
    q = f"{world['north']}の甘口と{world['south']}の甘口"
    out, steps = _loop(api, world, q)
    assert [s["action"] for s in steps] == ["SEARCH", "SEARCH", "SEARCH", "COMPLETE"]
    assert steps[1]["queries_text"] != steps[0]["queries_text"][1:]  # rewritten, not repeated
    assert len(steps[1]["queries_text"]) == 1  # only the gap is searched again
    assert out["round"] == 3
    assert [e["document_id"] for e in out["evidence"]] == [world["ids"]["n_sweet"]]
    assert out["missing"] == ["a2"] and "不足" in out["coverage_notes"] and world["south"] in out["coverage_notes"]


def test_loop_limit_when_nothing_is_found(api, world):
    out, steps = _loop(api, world, f"{world['south']}の甘口")
    assert out["action"] == "ERROR" and out["error_type"] == "LOOP_LIMIT"
    assert len(steps) == 4


def test_history_longer_than_the_limit_is_loop_limit(api, world):
    body = step_body(world, f"{world['north']}の辛口", search_history=[{"queries": ["x"], "results": []}] * 4)
    out = _step(api, body)
    assert out["action"] == "ERROR" and out["error_type"] == "LOOP_LIMIT"


def test_caller_cannot_raise_the_loop_cap(api, world):
    body = step_body(world, f"{world['south']}の甘口", constraints={"max_loops": 10})
    out = _step(api, body)
    assert out["max_loops"] == 3


def test_forged_state_is_refused(api, world):
    q = f"{world['north']}の辛口"
    first = _step(api, step_body(world, q))
    body, mac = first["state"].split(".")
    # flip the round back to 0 in the payload, keep the old signature
    import base64
    import json

    data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    data["round"] = 0
    forged = base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode() + "." + mac
    for state in (forged, "garbage", first["state"][:-2] + "xx"):
        out = _step(api, step_body(world, q, state=state))
        assert out["action"] == "ERROR" and out["error_type"] == "INVALID_INPUT", out


def test_state_of_another_question_is_refused(api, world):
    first = _step(api, step_body(world, f"{world['north']}の辛口"))
    out = _step(api, step_body(world, f"{world['south']}の辛口", state=first["state"]))
    assert out["action"] == "ERROR" and out["error_type"] == "INVALID_INPUT"


def test_emptied_state_is_counted_from_the_history(api, world):
    q = f"{world['south']}の甘口"  # never found
    empty_rounds = [{"queries": ["x"], "results": []}] * 3
    for state in (None, ""):
        out = _step(api, step_body(world, q, state=state, search_history=empty_rounds))
        assert out["round"] == 3
        assert out["action"] == "ERROR" and out["error_type"] == "LOOP_LIMIT"


def test_dropping_the_history_but_keeping_the_state_still_counts(api, world):
    q = f"{world['south']}の甘口"
    out = _step(api, step_body(world, q))
    for _ in range(3):
        out = _step(api, step_body(world, q, state=out["state"]))  # no history sent at all
    assert out["round"] == 3 and out["action"] == "ERROR" and out["error_type"] == "LOOP_LIMIT"


@pytest.mark.parametrize(
    "body",
    [
        {"request_id": "r", "user_query": ""},
        {"request_id": "r", "user_query": "x", "constraints": {"max_loops": 0}},
        {"request_id": "r", "user_query": "x", "search_history": [{"results": [{"score": 1}]}]},
        {"request_id": "r", "user_query": "x", "surprise": 1},
    ],
)
def test_malformed_bodies_are_the_contract_400(api, body):
    resp = api.post("/agent/librarian/think", json=body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "BAD_REQUEST"


def test_request_id_is_optional_and_generated_when_absent(api, world):
    # a caller cannot be expected to invent a tracing id: without one the step answers 200 with one made up
    body = step_body(world, f"{world['north']}の辛口")
    del body["request_id"]
    out = _step(api, body)
    assert out["action"] == "SEARCH" and out["request_id"].startswith("req-") and len(out["request_id"]) > 8
    again = _step(api, {**body, "state": out["state"]})  # the next step, still without one
    assert again["request_id"].startswith("req-")


def test_blank_question_is_error_invalid_input(api, world):
    out = _step(api, step_body(world, "   "))
    assert out["action"] == "ERROR" and out["error_type"] == "INVALID_INPUT"


def test_stateless_across_two_api_processes(apis, world):
    q = f"{world['north']}と{world['south']}の辛口を比べたい"
    body = step_body(world, q, request_id="req-alt")
    history, state, alternating = [], None, []
    for i in range(5):
        out = _step(apis[i % 2], {**body, "search_history": history, "state": state})
        alternating.append(out)
        if out["action"] != "SEARCH":
            break
        history.append(execute(apis[i % 2], out))
        state = out["state"]
    single, steps = _loop(apis[0], world, q, request_id="req-alt")
    assert alternating[-1]["action"] == "COMPLETE"
    assert len(alternating) == len(steps)
    for a, b in zip(alternating, steps, strict=True):
        assert a["action"] == b["action"]
        assert a.get("queries_text") == b.get("queries_text")
        assert a["state"] == b["state"]  # the same secret everywhere: the same signed state
    assert [e["document_id"] for e in alternating[-1]["evidence"]] == [e["document_id"] for e in single["evidence"]]


def test_openapi_publishes_the_schema(api):
    doc = api.get("/openapi.json").json()
    op = doc["paths"]["/agent/librarian/think"]["post"]
    assert op["operationId"] == "librarian_think"
    schemas = doc["components"]["schemas"]
    assert {"ThinkRequest", "ThinkStep", "Evidence", "Constraints", "HistoryEntry"} <= set(schemas)
    assert schemas["ThinkStep"]["properties"]["action"]["enum"] == ["SEARCH", "COMPLETE", "ERROR"]
    assert "/v1/think" in doc["paths"]
