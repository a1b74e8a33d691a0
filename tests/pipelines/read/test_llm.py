"""The optional vision read against a real local HTTP server speaking chat.completions."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler

import pytest

from pipelines.read.fields import extract_fields
from pipelines.read.llm import LabelLLM, LabelLLMError, build_label_llm, merge
from tests.http_stub import send_json, serve
from yana.settings import Settings

OCR_TEXT = "八海山\n特定名称 純米吟醸\n精米歩合 50%\nアルコ一ル分 15度\n内容量 720ml\n製造者 八海醸造株式会社\n新潟県南魚沼市長森1051"


class VisionStub:
    """Each POST answers the next scripted (content, delay_s)."""

    def __init__(self):
        self.queue: deque = deque()
        self.received: list[dict] = []
        self.stop = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                stub.received.append(body)
                content, delay = stub.queue.popleft() if stub.queue else ("{}", 0.0)
                if delay:
                    stub.stop.wait(delay)
                send_json(
                    self,
                    200,
                    {
                        "id": "chatcmpl-vision",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "m"),
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

        self.server = serve(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    s = VisionStub()
    yield s
    s.close()


def _answer(**over):
    base = dict.fromkeys(
        ("brand_name", "product_name", "brewery", "prefecture", "city", "grade", "seimai", "alcohol", "volume")
    )
    base.update(over)
    return json.dumps(base, ensure_ascii=False)


def test_values_are_checked_against_the_ocr_text(stub):
    stub.queue.append((_answer(brand_name="八海山", brewery="八海醸造", grade="純米大吟醸", alcohol="15度"), 0))
    llm = LabelLLM(base_url=stub.url, model="vision", timeout_s=5, budget_s=10)
    ex = llm.read(b"\xff\xd8jpeg", OCR_TEXT)
    f = ex.fields
    assert f["brand_name"].source == "llm" and f["brand_name"].confidence >= 0.8
    assert f["alcohol"].confidence >= 0.8  # アルコ一ル分 15度 bears out 15度
    assert f["grade"].value == "純米大吟醸" and f["grade"].confidence < 0.5  # the text says 純米吟醸
    body = stub.received[0]
    assert body["response_format"]["type"] == "json_schema"
    parts = body["messages"][1]["content"]
    assert any(
        p.get("type") == "image_url" and p["image_url"]["url"].startswith("data:image/jpeg;base64,") for p in parts
    )
    merged = merge(extract_fields(OCR_TEXT.splitlines()), ex)
    assert merged.values()["grade"] == "純米吟醸"  # an unsupported model value never wins over the OCR read


def test_one_repair_then_valid(stub):
    stub.queue.append(("Sure! The brand is 八海山.", 0))
    stub.queue.append((_answer(brand_name="八海山"), 0))
    llm = LabelLLM(base_url=stub.url, model="vision", timeout_s=5, budget_s=10)
    assert llm.read(b"x", OCR_TEXT).values() == {"brand_name": "八海山"}
    assert len(stub.received) == 2
    assert "not valid" in stub.received[1]["messages"][-1]["content"]


def test_two_bad_answers_fail_clearly(stub):
    stub.queue.extend([("nope", 0), ('{"brand_name": 3}', 0)])
    llm = LabelLLM(base_url=stub.url, model="vision", timeout_s=5, budget_s=10)
    with pytest.raises(LabelLLMError, match="after one repair"):
        llm.read(b"x", OCR_TEXT)
    assert len(stub.received) == 2


def test_the_budget_bounds_the_read(stub):
    stub.queue.append((_answer(brand_name="八海山"), 3.0))
    llm = LabelLLM(base_url=stub.url, model="vision", timeout_s=5, budget_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(LabelLLMError):
        llm.read(b"x", OCR_TEXT)
    assert time.monotonic() - t0 < 2.5


def test_built_only_when_configured(stub):
    assert build_label_llm(Settings(openai_base_url=stub.url)) is None
    assert build_label_llm(Settings(ocr_llm=True)) is None
    assert isinstance(build_label_llm(Settings(ocr_llm=True, openai_base_url=stub.url)), LabelLLM)
