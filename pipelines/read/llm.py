"""Optional: a vision model reads the label into the same fields, checked against the OCR text.

An OpenAI-compatible chat.completions endpoint gets the image (a data: URL) and the OCR text and
must answer JSON matching `SCHEMA` (response_format json_schema). An answer that is not valid
JSON for the schema gets one repair request; everything runs inside one time budget. Every value
the model returns is checked against the OCR text (`supported`): a value the text does not
support keeps a low confidence and is never preferred over an OCR read (`merge`).
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import replace

from pipelines.read.fields import Extraction, Field, fuzzy_key, normalize

FIELDS = ("brand_name", "product_name", "brewery", "prefecture", "city", "grade", "seimai", "alcohol", "volume")
SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "properties": {f: {"type": ["string", "null"]} for f in FIELDS},
    "required": list(FIELDS),
}
PROMPT = (
    "You read Japanese sake and juice labels. From the photo (and the OCR text, which may contain "
    "misread characters), give the fields exactly as printed on the label: brand_name (銘柄), "
    "product_name, brewery (製造者, without 株式会社), prefecture (with 県/府/都/道), city, grade "
    "(特定名称 such as 純米大吟醸), seimai (精米歩合 like 50%), alcohol (アルコール分 like 15度), volume "
    "(内容量 like 720ml). Use null for what the label does not show. Answer with JSON only."
)
SUPPORTED_CONFIDENCE = 0.8
UNSUPPORTED_CONFIDENCE = 0.2


class LabelLLMError(RuntimeError):
    code = "LLM_READ_FAILED"


def supported(value: str, ocr_text: str) -> bool:
    """Whether the OCR text bears `value` out: the value appears in it under the confusion
    folding, or (for numbers) its digits appear in it."""
    v = fuzzy_key(value)
    t = fuzzy_key(ocr_text)
    if not v:
        return False
    if v in t:
        return True
    digits = re.findall(r"\d+(?:\.\d+)?", normalize(value))
    return bool(digits) and all(d in normalize(ocr_text) for d in digits)


def _parse(content: str | None) -> dict[str, str]:
    if not content:
        raise ValueError("empty answer")
    text = content.strip()
    if text.startswith("```"):
        text = re.sub(r"^```(?:json)?|```$", "", text).strip()
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("the answer is not a JSON object")
    out = {}
    for k, v in data.items():
        if k not in FIELDS:
            raise ValueError(f"unknown field {k!r}")
        if v is not None and not isinstance(v, str):
            raise ValueError(f"{k} must be a string or null")
        if v:
            out[k] = v.strip()
    return out


class LabelLLM:
    def __init__(
        self, *, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 15.0, budget_s: float = 20.0
    ) -> None:
        from openai import OpenAI

        self.client = OpenAI(base_url=base_url, api_key=api_key or "not-needed", max_retries=0)
        self.model = model
        self.timeout_s = timeout_s
        self.budget_s = budget_s

    def _ask(self, messages: list[dict], deadline: float) -> str | None:
        import openai

        left = deadline - time.monotonic()
        if left <= 0.05:
            raise LabelLLMError("the vision read ran out of its time budget")
        try:
            resp = self.client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "label_fields", "schema": SCHEMA, "strict": True},
                },  # type: ignore[arg-type]
                timeout=min(self.timeout_s, left),
                temperature=0,
            )
        except openai.APITimeoutError as exc:
            raise LabelLLMError("the vision model timed out") from exc
        except openai.OpenAIError as exc:
            raise LabelLLMError(f"the vision model failed: {exc}") from exc
        return resp.choices[0].message.content if resp.choices else None

    def read(self, image: bytes, ocr_text: str, mime: str = "image/jpeg") -> Extraction:
        """Fields the model reads from `image`, each checked against `ocr_text`."""
        deadline = time.monotonic() + self.budget_s
        url = f"data:{mime};base64,{base64.b64encode(image).decode()}"
        messages: list[dict] = [
            {"role": "system", "content": PROMPT},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"OCR text:\n{ocr_text or '(none)'}"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            },
        ]
        content = self._ask(messages, deadline)
        try:
            values = _parse(content)
        except ValueError as first:
            messages += [
                {"role": "assistant", "content": content or ""},
                {
                    "role": "user",
                    "content": f"That answer was not valid ({first}). Reply with only the JSON object "
                    f"of the schema, every field a string or null.",
                },
            ]
            try:
                values = _parse(self._ask(messages, deadline))
            except ValueError as exc:
                raise LabelLLMError(f"the vision model's answer was not valid JSON after one repair: {exc}") from exc
        fields = {}
        for k, v in values.items():
            ok = supported(v, ocr_text)
            conf = SUPPORTED_CONFIDENCE if ok else UNSUPPORTED_CONFIDENCE
            fields[k] = Field(v, "llm", conf, "ocr text" if ok else "not in the ocr text")
        return Extraction(fields, ())


def merge(ocr: Extraction, llm: Extraction) -> Extraction:
    """OCR fields, completed by the model: a supported model value fills a missing field or
    replaces a less confident OCR value; an unsupported one only fills a gap, at low confidence."""
    out = dict(ocr.fields)
    for k, f in llm.fields.items():
        mine = out.get(k)
        if mine is None or (f.confidence >= SUPPORTED_CONFIDENCE and f.confidence > mine.confidence):
            out[k] = f
        elif normalize(mine.value) == normalize(f.value):
            out[k] = replace(mine, confidence=max(mine.confidence, f.confidence))
    return Extraction(out, ocr.label_features)


def build_label_llm(settings) -> LabelLLM | None:
    """The vision reader the settings ask for (OCR_LLM and OPENAI_BASE_URL), else None."""
    if not (settings.ocr_llm and settings.openai_base_url):
        return None
    return LabelLLM(
        base_url=settings.openai_base_url,
        model=settings.openai_model,
        api_key=settings.openai_api_key,
        timeout_s=settings.ocr_llm_timeout_s,
        budget_s=settings.ocr_llm_budget_s,
    )
