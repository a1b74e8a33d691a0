"""Sanity checks for the Japanese retrieval eval set (corpus.jsonl + questions.jsonl).

Run: /work/main/.venv/bin/python bench/evalsets/retrieve/ja/check.py
Needs fugashi + unidic-lite. Exits non-zero when a rule is broken.
"""
import json, math, os, statistics, sys, unicodedata
from collections import Counter
import fugashi

HERE = os.path.dirname(os.path.abspath(__file__))
CONTENT_POS = {"名詞", "動詞", "形容詞", "形状詞"}
TAGGER = fugashi.Tagger()

def load(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]

def content_lemmas(text):
    """Content words (nouns, verbs, adjectives, na-adjectives) as lemmas.
    Excludes numerals (数詞), grammatical 'non-independent' words (する, ある, こと, 方 ...:
    pos2 非自立可能), auxiliary stems (よう, そう: pos2 助動詞語幹), particles,
    auxiliaries and symbols."""
    out = []
    for w in TAGGER(unicodedata.normalize("NFKC", text)):
        f = w.feature
        if f.pos1 not in CONTENT_POS or f.pos2 in ("数詞", "非自立可能", "助動詞語幹"):
            continue
        lemma = (f.lemma or w.surface).split("-")[0]
        if lemma.isdigit():
            continue
        out.append(lemma)
    return out

# The name bench/retrieve_eval.py uses to check this set's overlap rule.
content_words = content_lemmas

def bigrams(text):
    t = "".join(unicodedata.normalize("NFKC", text).split())
    return [t[i:i + 2] for i in range(len(t) - 1)] or [t]

class BM25:
    def __init__(self, docs, k1=1.5, b=0.75):
        self.k1, self.b = k1, b
        self.tfs = [Counter(d) for d in docs]
        self.lens = [len(d) for d in docs]
        self.avg = sum(self.lens) / len(docs)
        df = Counter(t for tf in self.tfs for t in tf)
        n = len(docs)
        self.idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}

    def scores(self, query):
        qs = set(query)
        out = []
        for tf, L in zip(self.tfs, self.lens):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * L / self.avg)
            for t in qs:
                f = tf.get(t)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out

def evaluate(name, tok, corpus, questions):
    bm = BM25([tok(p["text"]) for p in corpus])
    ids = [p["id"] for p in corpus]
    essay_of = {p["id"]: p["essay"] for p in corpus}
    h1 = h3 = rr = e3 = 0.0
    for q in questions:
        sc = bm.scores(tok(q["question"]))
        order = sorted(range(len(ids)), key=lambda i: -sc[i])
        ranked = [ids[i] for i in order]
        gold = set(q["answer_ids"])
        rank = next(r for r, d in enumerate(ranked, 1) if d in gold)
        h1 += rank == 1; h3 += rank <= 3; rr += 1 / rank
        gold_essays = {essay_of[a] for a in gold}
        e3 += any(essay_of[d] in gold_essays for d in ranked[:3])
    n = len(questions)
    print(f"BM25 [{name}] hit@1={h1/n:.3f} hit@3={h3/n:.3f} MRR={rr/n:.3f} "
          f"(essay-level hit@3={e3/n:.3f})")
    return h3 / n

def main():
    corpus, questions = load("corpus.jsonl"), load("questions.jsonl")
    errors = []
    by_id = {p["id"]: p for p in corpus}
    if len(by_id) != len(corpus):
        errors.append("duplicate paragraph ids")
    essays = Counter(p["essay"] for p in corpus)
    lens = [len(p["text"]) for p in corpus]
    print(f"paragraphs={len(corpus)} essays={len(essays)} questions={len(questions)}")
    print(f"chars/paragraph min={min(lens)} median={statistics.median(lens)} max={max(lens)}")
    print(f"paragraphs/essay min={min(essays.values())} max={max(essays.values())}")
    if len(corpus) < 300:
        errors.append(f"only {len(corpus)} paragraphs (< 300)")
    if len(questions) < 50:
        errors.append(f"only {len(questions)} questions (< 50)")
    for q in questions:
        for a in q["answer_ids"]:
            if a not in by_id:
                errors.append(f"{q['id']}: answer_id {a} not in corpus")
    if errors:
        print("\n".join("ERROR: " + e for e in errors)); sys.exit(1)

    q_per_essay = Counter(by_id[q["answer_ids"][0]]["essay"] for q in questions)
    print(f"essays with answers={len(q_per_essay)} max questions/essay={max(q_per_essay.values())}")
    print("kinds:", dict(Counter(q["kind"] for q in questions)))

    overlaps, viol = [], []
    for q in questions:
        qw = set(content_lemmas(q["question"]))
        pw = set()
        for a in q["answer_ids"]:
            pw |= set(content_lemmas(by_id[a]["text"]))
        ov = len(qw & pw) / len(qw) if qw else 0.0
        overlaps.append(ov)
        if ov > 0.5:
            viol.append(f"  {q['id']} overlap={ov:.2f} shared={sorted(qw & pw)}")
    print(f"content-word overlap question->answer: max={max(overlaps):.2f} mean={statistics.mean(overlaps):.2f}")
    print(f"overlap violations (>0.5): {len(viol)}")
    for v in viol:
        print(v)
    if viol:
        errors.append(f"{len(viol)} questions with overlap > 0.5")

    for name, tok in (("fugashi lemma content words", content_lemmas), ("char bigrams NFKC", bigrams)):
        h3 = evaluate(name, tok, corpus, questions)
        if h3 > 0.75:
            errors.append(f"BM25 hit@3 {h3:.3f} > 0.75 with {name}")
    if errors:
        print("\n".join("ERROR: " + e for e in errors)); sys.exit(1)
    print("OK")

if __name__ == "__main__":
    main()
