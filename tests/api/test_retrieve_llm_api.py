"""/v1/retrieve with an LLM configured: the LLM + REPL loop over real HTTP (a private stack whose
API and worker point OPENAI_BASE_URL at the scripted model server), its fallbacks, and the job it
becomes when its wall-clock cap does not fit in the request's budget."""

from __future__ import annotations

import httpx
import pytest

from tests.pipelines.rlm_stub import ENDLESS, FABRICATE, GOOD, ScriptedModel
from tests.stack import start_stack, wait_job

pytestmark = pytest.mark.stack  # a private stack of its own (its API and worker point at the model)

DOCS = [
    {
        "id": "harbour",
        "text": "The harbour froze in 1947.  Boats stayed\nin port for a month. 🌊",
        "metadata": {"k": 1},
    },
    {"id": "sake", "text": "小樽の酒蔵は明治に始まった。北海道の米で造る酒は軽やかだ。"},
    {"id": "bread", "text": "Bread riots spread in 1789 when flour prices doubled."},
]


@pytest.fixture(scope="module")
def model():
    server = ScriptedModel()
    yield server
    server.close()


@pytest.fixture(scope="module")
def llm_stack(tmp_path_factory, model):
    s = start_stack(
        tmp_path_factory.mktemp("retrieve_llm"),
        chroma=False,
        OPENAI_BASE_URL=model.base_url,
        OPENAI_MODEL="scripted",
        RETRIEVE_LLM_TIMEOUT_S="4",
        RETRIEVE_LLM_EXEC_TIMEOUT_S="1",
    )
    yield s
    s.stop()


@pytest.fixture
def client(llm_stack):
    with httpx.Client(base_url=llm_stack.api_url, timeout=60) as c:
        yield c


def _script(model: ScriptedModel, code: str) -> None:
    model.policy = lambda messages: "yes" if messages[0]["role"] != "system" else code


def _exact(results: list[dict]) -> None:
    """Each text is verbatim in its document (the passage around the host-verified evidence) and its
    spans are byte ranges inside that text."""
    by_id = {d["id"]: d["text"] for d in DOCS}
    for r in results:
        assert r["text"] in by_id[r["doc_id"]] and r["spans"]
        raw = r["text"].encode("utf-8")
        for s in r["spans"]:
            assert 0 <= s["start"] < s["end"] <= len(raw)
            raw[s["start"] : s["end"]].decode("utf-8")


def test_llm_loop_answers_with_exact_spans(client, model):
    _script(model, GOOD)
    r = client.post("/v1/retrieve", json={"query": "when did the harbour freeze", "documents": DOCS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["path"] == "llm" and any("answered by the LLM loop" in w for w in body["warnings"])
    assert body["results"][0]["doc_id"] == "harbour" and body["results"][0]["metadata"] == {"k": 1}
    _exact(body["results"])
    sandbox = body["stats"]["llm"]["sandbox"]
    assert sandbox["uid"] != 0 and "net" in sandbox["namespaces"]


def test_fabricated_passages_never_come_back(client, model):
    _script(model, FABRICATE)
    body = client.post("/v1/retrieve", json={"query": "flour prices", "documents": DOCS}).json()
    assert body["path"] == "llm"
    assert any("were not found in the documents and were dropped" in w for w in body["warnings"])
    assert all("appears in no document" not in x["text"] for x in body["results"])
    _exact(body["results"])


def test_endless_code_falls_back_and_the_api_lives_on(client, model):
    _script(model, ENDLESS)
    body = client.post("/v1/retrieve", json={"query": "sake brewery", "documents": DOCS}).json()
    assert body["path"] == "extractor"
    assert any("the LLM loop failed (sandbox timeout)" in w for w in body["warnings"])
    assert body["results"][0]["doc_id"] == "sake"
    _exact(body["results"])
    assert client.get("/v1/health").status_code == 200


def test_loop_over_the_request_budget_runs_as_a_job(client, model):
    _script(model, GOOD)
    body = {"query": "when did the harbour freeze", "documents": DOCS, "options": {"timeout_ms": 2000}}
    r = client.post("/v1/retrieve", json=body)
    assert r.status_code == 202, r.text
    job = wait_job(client, r.json()["job_id"], timeout_s=60)
    assert job["status"] == "succeeded", job
    assert job["result"]["path"] == "llm" and job["result"]["results"][0]["doc_id"] == "harbour"
    _exact(job["result"]["results"])
    # mode "extractor" never calls the model, whatever the budget
    calls = model.requests
    plain = client.post("/v1/retrieve", json={**body, "options": {"timeout_ms": 2000, "mode": "extractor"}})
    assert plain.status_code == 200 and plain.json()["path"] == "extractor" and model.requests == calls


ONE_SENTENCE = """```python
FINAL([{"doc_id": "harbour", "text": "Boats stayed in port for a month.", "score": 0.9}])
```"""


def test_llm_answers_passages_around_the_verified_evidence(client, model):
    """The model names one sentence; the host finds it and returns the passage of options.passage
    around it (the chunk by default), the sentence as the span inside that text."""
    _script(model, ONE_SENTENCE)
    texts = {}
    for mode in ("chunk", "window", "document"):
        body = {"query": "how long did boats stay in port", "documents": DOCS, "options": {"passage": mode}}
        out = client.post("/v1/retrieve", json=body).json()
        assert out["path"] == "llm", out
        top = out["results"][0]
        _exact(out["results"])
        raw = top["text"].encode("utf-8")
        assert [raw[s["start"] : s["end"]].decode("utf-8") for s in top["spans"]] == [
            "Boats stayed\nin port for a month."
        ]
        texts[mode] = top["text"]
    assert texts["chunk"] == texts["document"] == DOCS[0]["text"]  # a short document is one chunk
    assert texts["window"] == "Boats stayed\nin port for a month."
