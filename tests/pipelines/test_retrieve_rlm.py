"""The retrieve LLM loop driven by a real OpenAI-compatible server scripting the model's code.

Over every question of both eval sets (bench/evalsets/retrieve/{en,ja}), each question getting
one scripted behaviour (good code, bad code then good, code that never finishes, a fabricated
passage): no returned result is fabricated, and hit@3 is never below the extractor's. The
extractor here is lexical (no embedding model in this test); bench/retrieve_eval.py --llm runs
the same over the hybrid extractor.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.retrieve.rlm import ChatModel, LoopConfig, refind, run_loop, verify
from pipelines.retrieve.sandbox import Limits
from tests.pipelines.rlm_stub import BEHAVIOURS, GOOD, ScriptedModel, behaviour
from tools.retrieve_rlm_eval import evaluate, fabricated, make_extractor

SETS = Path(__file__).resolve().parents[2] / "bench" / "evalsets" / "retrieve"
CONFIG = LoopConfig(max_iterations=4, timeout_s=20, exec_timeout_s=0.5, limits=Limits(memory_mb=512))


def _load(name: str):
    rows = lambda f: [json.loads(x) for x in (SETS / name / f).read_text(encoding="utf-8").splitlines() if x.strip()]  # noqa: E731
    return rows("corpus.jsonl"), rows("questions.jsonl")


@pytest.fixture
def scripted():
    server = ScriptedModel()
    yield server
    server.close()


@pytest.mark.stack  # the whole eval set through the loop (~40 s each on a loaded 2-core machine): slow tier
@pytest.mark.parametrize("name", ["en", "ja"])
def test_whole_eval_set_no_fabrication_and_never_below_the_extractor(name, scripted):
    corpus, questions = _load(name)
    assert len(questions) >= 50
    assert {behaviour(q["question"]) for q in questions} == set(BEHAVIOURS)  # every behaviour is exercised
    docs = [{"id": c["id"], "text": c["text"]} for c in corpus]
    model = ChatModel(scripted.base_url, None, "scripted")
    out = evaluate(corpus, questions, model, CONFIG, make_extractor(docs))
    print(name, json.dumps(out))
    assert out["fabricated"] == 0
    assert out["rlm"]["hit@3"] >= out["extractor"]["hit@3"]
    assert out["worse"] == 0  # not on average: on no question did the loop lose a top-3 hit
    # the loop really answered (good, bad-then-good, fabricate), and fell back on code that never ends
    assert out["paths"]["llm"] >= len(questions) // 2
    assert out["fallbacks"].get("sandbox timeout", 0) >= 1
    assert out["dropped"] >= 2 * sum(1 for q in questions if behaviour(q["question"]) == "fabricate")


def test_fabricated_passages_are_dropped_and_spans_are_the_hosts():
    text = "Il pleut.  It rains\non the 港 harbour 🌊 today."
    docs = [{"id": "d", "text": text}]
    picked, dropped = verify(
        [
            {"doc_id": "d", "text": "It rains on the 港 harbour", "score": 0.9},  # whitespace collapsed: found
            {"doc_id": "d", "text": "It snows", "score": 1.0},  # not in the text
            {"doc_id": "x", "text": "It rains", "score": 1.0},  # unknown document
            {"doc_id": "d", "text": 42},
        ],
        docs,
    )
    assert dropped == 3 and list(picked) == ["d"]
    (a, b), score = picked["d"]
    assert text[a:b] == "It rains\non the 港 harbour" and score == 0.9
    assert refind(text, "harbour 🌊 today.") is not None and refind(text, "") is None


def test_endpoint_down_falls_back_to_the_extractor():
    docs = [{"id": "a", "text": "The harbour froze in 1947."}, {"id": "b", "text": "Cats sleep."}]
    extract = make_extractor(docs)
    base = extract("when did the harbour freeze", 50)
    model = ChatModel("http://127.0.0.1:9/v1", None, "none")  # nothing listens on the discard port
    out = run_loop(
        "when did the harbour freeze",
        docs,
        model=model,
        extract=extract,
        lexical=lambda q, k: [],
        baseline=base,
        config=CONFIG,
        top_k=5,
    )
    assert out.path == "extractor" and out.results == base[:5]
    assert "the LLM loop failed (APIConnectionError)" in out.warnings[0]
    assert fabricated(out.results, docs) == 0


def test_iteration_cap_without_final_falls_back(scripted):
    scripted.policy = lambda messages: "```python\nprint(len(documents))\n```"
    docs = [{"id": "a", "text": "The harbour froze in 1947."}]
    extract = make_extractor(docs)
    out = run_loop(
        "harbour",
        docs,
        model=ChatModel(scripted.base_url, None, "m"),
        extract=extract,
        lexical=lambda q, k: [],
        baseline=extract("harbour", 50),
        config=CONFIG,
        top_k=5,
    )
    assert out.path == "extractor" and out.stats["iterations"] == CONFIG.max_iterations
    assert "no FINAL within the iteration cap" in out.warnings[0]


def test_token_cap_stops_the_loop(scripted):
    scripted.policy = lambda messages: "```python\nprint(1)\n```"
    docs = [{"id": "a", "text": "The harbour froze in 1947."}]
    extract = make_extractor(docs)
    cfg = LoopConfig(max_iterations=10, max_tokens=300, exec_timeout_s=1.0)  # the stub reports 150 a call
    out = run_loop(
        "harbour",
        docs,
        model=ChatModel(scripted.base_url, None, "m"),
        extract=extract,
        lexical=lambda q, k: [],
        baseline=extract("harbour", 50),
        config=cfg,
        top_k=5,
    )
    assert out.path == "extractor" and out.stats["iterations"] == 2 and "token cap" in out.warnings[0]


def test_good_code_answers_with_blended_scores(scripted):
    scripted.policy = lambda messages: "yes" if messages[0]["role"] != "system" else GOOD
    docs = [
        {"id": "a", "text": "The harbour froze in 1947. Boats stayed in port."},
        {"id": "b", "text": "港は1947年に凍った。船は出なかった。"},
    ]
    extract = make_extractor(docs)
    base = extract("harbour froze 1947", 50)
    out = run_loop(
        "harbour froze 1947",
        docs,
        model=ChatModel(scripted.base_url, None, "m"),
        extract=extract,
        lexical=lambda q, k: [],
        baseline=base,
        config=CONFIG,
        top_k=5,
    )
    assert out.path == "llm" and out.results[0]["doc_id"] == "a"
    # self-assessment (the extractor's score, as the script says) blended with the evidence
    assert out.results[0]["score"] == pytest.approx(base[0]["score"], abs=1e-6)
    assert fabricated(out.results, docs) == 0
    assert out.stats["sandbox"]["namespaces"]
