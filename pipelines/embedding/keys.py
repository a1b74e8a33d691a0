"""The Redis layout of embedding: the only module that spells its keys.

yana:embed:default_model            string: the model new collections use (set by a re-embed's swap)
yana:emb:{model}:{kind}:{sha256}    string: one cached vector (base64 float32), with a TTL
yana:embcache:stats                 hash: hits, misses
"""

import hashlib

DEFAULT_MODEL_KEY = "yana:embed:default_model"
CACHE_STATS_KEY = "yana:embcache:stats"


def cache_key(model: str, kind: str, text: str) -> str:
    return f"yana:emb:{model}:{kind}:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"
