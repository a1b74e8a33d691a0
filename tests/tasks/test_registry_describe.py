"""Monitoring shows what a job is: Flower's args column gets kind, id and size."""

from __future__ import annotations

import orjson

from tasks.registry import describe


def test_describe_names_kind_id_and_size():
    ingest = {"kind": "ingest", "id": "j1", "params": {"items": [{}, {}, {}], "documents": [{}]}, "attempts": 0}
    assert describe(ingest) == "ingest job j1: 3 images, 1 documents"
    stored = {**ingest, "params": orjson.dumps(ingest["params"]).decode(), "attempts": 1}  # as the store keeps it
    assert describe(stored) == "ingest job j1: 3 images, 1 documents (attempt 2)"
    assert describe({"kind": "reembed", "id": "j2", "params": {"model": "m"}}) == "reembed job j2: model m"
    assert describe({"kind": "demo.sleep", "id": "j3", "params": {"steps": 2, "step_s": 0}}) == (
        "demo.sleep job j3: step_s=0, steps=2"
    )
