"""Content hashes of an image: sha1 of the bytes (exact duplicates) and the 64-bit pHash
(near-duplicate candidates), with the one Hamming distance implementation."""

from __future__ import annotations

import hashlib

import imagehash
import numpy as np
from PIL import Image


def sha1_hex(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


def phash_hex(image: Image.Image) -> str:
    """64-bit DCT perceptual hash (imagehash.phash, 8x8) as 16 hex chars."""
    return str(imagehash.phash(image, hash_size=8))


def phash_int(hex16: str) -> int:
    return int(hex16, 16)


def hamming(a: str | int, b: str | int) -> int:
    """Bits that differ between two 64-bit hashes (ints or 16 hex chars): the one implementation."""
    a = phash_int(a) if isinstance(a, str) else a
    b = phash_int(b) if isinstance(b, str) else b
    return (a ^ b).bit_count()


def hamming_array(a, b) -> np.ndarray:
    """`hamming` over uint64 arrays (or a Python int), broadcasting like numpy."""
    return np.bitwise_count(np.asarray(a, dtype=np.uint64) ^ np.asarray(b, dtype=np.uint64))
