"""Pictures of indexed labels for the aligned picture check, made from their stored originals.

Redis keeps no picture (pipelines.neardup.decision): the check needs one only where the read text
of a candidate agrees, a few times per label at most, so it is made then from the original in the
blob store (the entry's blob key; labels indexed before entries kept it: the label-image map).
Pictures are content-addressed by that key, so a small per-process cache of their JPEGs
(~10 KB each) serves a bulk upload's re-photographs of one label without reading it again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from pipelines.labels import schema as labels
from pipelines.neardup import picture, printed
from yana.blobs import BlobMissing, BlobStore

CACHED = 256  # pictures' JPEGs kept per process (~2.5 MB)
CACHED_GREYS = 4  # the printed-lines check's greys kept per process (up to ~2.5 MB each: pool processes are small)


class StoredPictures:
    """decision.Pictures over the blob store; one per process (see `stored_pictures`)."""

    def __init__(self, r, blobs: BlobStore):
        self.r = r
        self.blobs = blobs
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._greys: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, refs: list[tuple[str, str]]) -> list[np.ndarray | None]:
        return [self._picture(key) if key else None for key in self._keys(refs)]

    def greys(self, refs: list[tuple[str, str]]) -> list[np.ndarray | None]:
        """decision.Greys: the printed-lines check's greys of the same originals."""
        return [self._grey(key) if key else None for key in self._keys(refs)]

    def _keys(self, refs: list[tuple[str, str]]) -> list[str]:
        keys = [key for _label, key in refs]
        unknown = [i for i, key in enumerate(keys) if not key]
        if unknown and self.r is not None:
            found = self.r.hmget(labels.LABEL_IMAGES_KEY, [refs[i][0] for i in unknown])
            for i, key in zip(unknown, found, strict=True):
                keys[i] = key.decode() if isinstance(key, bytes) else (key or "")
        return keys

    def _grey(self, key: str) -> np.ndarray | None:
        return self._cached(self._greys, CACHED_GREYS, key, printed.grey_of_original)

    def _picture(self, key: str) -> np.ndarray | None:
        jpeg = self._cached(self._cache, CACHED, key, picture.encode_original)
        return picture.decode(jpeg) if jpeg is not None else None

    def _cached(self, cache: OrderedDict, limit: int, key: str, make: Callable[[bytes], Any]) -> Any:
        """`make(original)` of the blob at `key`, kept in `cache` (the `limit` last used); None when
        the blob is gone (deleted since: the signature's verdict stands) or no longer decodes."""
        with self._lock:
            found = cache.get(key)
            if found is not None:
                cache.move_to_end(key)
                return found
        try:
            data = self.blobs.get(key)  # bytes ingest accepted (under its size limit then)
        except BlobMissing:
            return None
        try:
            found = make(data)
        except Exception:  # noqa: BLE001 - ingest decoded these bytes once; if they no longer decode, nothing
            return None
        with self._lock:
            cache[key] = found
            while len(cache) > limit:
                cache.popitem(last=False)
        return found


_shared: dict[tuple[int, int], StoredPictures] = {}
_shared_lock = threading.Lock()


def stored_pictures(r, blobs: BlobStore) -> StoredPictures:
    """One StoredPictures per (Redis client, blob store) per process (the cache is shared)."""
    key = (id(r), id(blobs))
    with _shared_lock:
        found = _shared.get(key)
        if found is None:
            found = _shared[key] = StoredPictures(r, blobs)
        return found
