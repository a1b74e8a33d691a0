"""Helpers of the chat API tests and benches: a few real labels ingested through /v1/ingest, and an
extra API process of the test stack wired to the OpenAI stub."""

from __future__ import annotations

import base64
import io

import httpx

from cli import processes

LABELS = [
    {
        "category": "sake",
        "brand_name": "北の誉",
        "product_name": "純米吟醸",
        "brewery": "北の誉酒造",
        "region": "小樽",
        "label_features": ["辛口", "フルーティー"],
        "text": "小樽の蔵が造る、キレのある辛口の純米吟醸。",
    },
    {
        "category": "sake",
        "brand_name": "田酒",
        "product_name": "特別純米",
        "brewery": "西田酒造店",
        "region": "青森",
        "label_features": ["旨口", "米の香り"],
        "text": "青森の米の旨みが広がる特別純米酒。",
    },
    {
        "category": "juice",
        "brand_name": "りんごの詩",
        "product_name": "ストレート果汁",
        "brewery": "弘前りんご園",
        "region": "弘前",
        "label_features": ["無添加", "甘酸っぱい"],
        "text": "弘前のりんごを搾った無添加ストレートジュース。",
    },
]


def _png_base64(fields: dict) -> str:
    from tools.datagen.images import render_label

    buf = io.BytesIO()
    render_label(fields).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def ingest_labels(api: httpx.Client, labels: list[dict] = LABELS, timeout_s: float = 240) -> dict[str, str]:
    """Ingest the labels as one job (images + fields); returns {brand_name: label id}."""
    from tests.stack import wait_job

    items = [{**fields, "image_base64": _png_base64(fields), "name": fields["brand_name"]} for fields in labels]
    r = api.post("/v1/ingest", json={"items": items})
    if r.status_code == 200:  # a single exact duplicate answers at once
        return {labels[0]["brand_name"]: r.json()["id"]}
    assert r.status_code == 202, r.text
    job = wait_job(api, r.json()["job_id"], timeout_s=timeout_s)
    assert job["status"] == "succeeded", job
    out = {}
    for item in job["result"]["items"]:
        assert item.get("id"), item
        out[item["name"]] = item["id"]
    return out


def start_chat_api(stack, name: str, **env: str) -> processes.Service:
    """Another API process of the stack (same Redis / Chroma) with its own settings."""
    base = {"RATE_LIMIT": "1000/second", "RATE_BURST": "1000"}
    return stack.start_api(name=name, **{**base, **env})


def stop_service(stack, svc: processes.Service) -> None:
    processes.stop([svc])
    if svc in stack.services:
        stack.services.remove(svc)
