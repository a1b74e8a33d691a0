"""Helpers shared by the ingest tests: a tiny local sentence-transformers model (no download) and
an isolated pipeline environment (own Redis database, PersistentClient, data folder)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import redis


def build_tiny_st_model(path: Path, name: str = "e5-tiny") -> str:
    """A small, randomly initialised BERT saved as a sentence-transformers folder."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *list("酒米水麹甘辛口香りのはあいうえお日本地域銘柄特徴:abcdefghijklmnopqrstuvwxyz"),
    ]
    (path / "vocab.txt").write_text("\n".join(vocab), encoding="utf-8")
    tok = BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True, tokenize_chinese_chars=True)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    hf = path / "hf"
    BertModel(cfg).save_pretrained(hf)
    tok.save_pretrained(hf)
    word = Transformer(str(hf), max_seq_length=64)
    st = SentenceTransformer(modules=[word, Pooling(word.get_embedding_dimension(), "mean")], device="cpu")
    out = path / name  # "e5" in the name: the prefix table gives it query:/passage:
    st.save(str(out))
    return str(out)


@dataclass
class PipelineEnv:
    r: redis.Redis
    chroma: object
    s: object  # Settings
    data_dir: Path
    import_dir: Path


def make_env(redis_url: str, tmp_path: Path, db: int = 7, **overrides) -> PipelineEnv:
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    from yana.settings import get_settings

    base = redis_url.rsplit("/", 1)[0]
    r = redis.Redis.from_url(f"{base}/{db}", decode_responses=True)
    r.flushdb()
    data_dir, import_dir = tmp_path / "data", tmp_path / "imports"
    data_dir.mkdir()
    import_dir.mkdir()
    chroma = chromadb.PersistentClient(
        path=str(tmp_path / "chroma"), settings=ChromaSettings(anonymized_telemetry=False)
    )
    s = get_settings().model_copy(
        update={
            "data_dir": data_dir,
            "import_dir": import_dir,
            "phash_threshold": 10,
            "ingest_batch_size": 4,
            "reembed_batch_size": 4,
            "embed_model": None,
            "ocr_mode": "off",  # reading labels is slow: the tests that read opt in (test_ingest_read.py)
            **overrides,
        }
    )
    return PipelineEnv(r, chroma, s, data_dir, import_dir)


class FakeJob:
    """A job handle whose cursor survives 'crashes' (the real one keeps it in the job record)."""

    def __init__(self, job_id: str = "job-test", crash_after_saves: int | None = None):
        self.job_id = job_id
        self.meta: dict = {}
        self.saves = 0
        self.crash_after_saves = crash_after_saves
        self.progress_calls: list[tuple[str, int, int]] = []

    def progress(self, stage: str, done: int, total: int) -> None:
        self.progress_calls.append((stage, done, total))

    def save_meta(self, **values) -> None:
        self.saves += 1
        if self.crash_after_saves is not None and self.saves > self.crash_after_saves:
            raise SystemExit("simulated kill before the cursor was saved")
        self.meta.update(values)


def ingest_bytes(env: PipelineEnv, images: list[bytes], job_id: str, fields: dict | None = None) -> dict:
    """Run an ingest job over image bytes staged as uploads are (category sake, plus `fields`)."""
    from pipelines.ingest import pipeline as ingest

    job = FakeJob(job_id)
    items = []
    for i, data in enumerate(images):
        p = env.data_dir / "incoming" / job_id / f"{i}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        items.append(
            {
                "index": i,
                "name": f"{i}.img",
                "source": {"kind": "stored", "path": f"incoming/{job_id}/{i}.bin"},
                "fields": {"category": "sake", **(fields or {})},
            }
        )
    return ingest.run_ingest(job, items=items, r=env.r, chroma=env.chroma, s=env.s)


def store_original(blobs, image, quality: int = 90) -> str:
    """`image` as a JPEG original in the blob store, as ingest keeps one; returns its blob key."""
    import io

    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=quality)
    key = f"images/{len(list(blobs.list('images/'))):04d}.jpg"
    blobs.put(key, buf.getvalue())
    return key
