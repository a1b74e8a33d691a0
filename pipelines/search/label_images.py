"""A label's stored image: where it is in the blob store (GET /v1/labels/{id}/image)."""

from __future__ import annotations

from pipelines.labels import schema as labels
from pipelines.search import collections as vector_index
from pipelines.search import lexical


def image_key(r, label_id: str) -> str | None:
    """The blob key of the label's image, or None (no such label, or a text document)."""
    if not labels.LABEL_ID.match(label_id):
        return None
    key = r.hget(labels.LABEL_IMAGES_KEY, label_id)
    if key:
        return key
    # Labels indexed before the map existed: the file_path in the chunk's metadata (local store).
    collection = vector_index.active_name(r)
    if collection:
        meta = lexical.chunk_meta(r, collection, labels.chunk_id(label_id, 0))
        if meta:
            return meta.get("file_path") or None
    return None
