#!/usr/bin/env python3
"""Sanity checks for the English inline-retrieval eval set (stdlib only).

Prints corpus/question statistics, question-to-answer content-word overlap,
and a BM25-only baseline (each paragraph is one document). Exits non-zero
if the set breaks one of its own rules.
"""
import json
import math
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent

STOP = set("""
a about above after again against all also am an and any are aren't as at be because been before being
below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down
during each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here
here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself
let's me more most mustn't my myself no nor not of off on once only or other ought our ours ourselves
out over own same shan't she she'd she'll she's should shouldn't so some such than that that's the their
theirs them themselves then there there's these they they'd they'll they're they've this those through
to too under until up very was wasn't we we'd we'll we're we've were weren't what what's when when's
where where's which while who who's whom why why's with won't would wouldn't you you'd you'll you're
you've your yours yourself yourselves s t just will one ever even many much whose
""".split())

TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?")


def stem(w):
    for suf in ("ing", "ed", "es", "s"):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            return w[: -len(suf)]
    return w


def terms(text):
    out = []
    for w in TOKEN.findall(text.lower()):
        if w in STOP:
            continue
        w = w.split("'")[0]
        if len(w) < 2 or w in STOP:
            continue
        out.append(stem(w))
    return out


# The name bench/retrieve_eval.py uses to check this set's overlap rule.
content_words = terms


class BM25:
    def __init__(self, docs, k1=1.5, b=0.75):
        self.k1, self.b = k1, b
        self.tf = [Counter(d) for d in docs]
        self.len = [len(d) for d in docs]
        self.avg = sum(self.len) / len(docs)
        df = Counter()
        for t in self.tf:
            df.update(t.keys())
        n = len(docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def scores(self, query):
        out = []
        for tf, dl in zip(self.tf, self.len):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * dl / self.avg)
            for q in query:
                f = tf.get(q)
                if f:
                    s += self.idf[q] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out


def load(name):
    rows = []
    with open(HERE / name, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"{name}:{i}: bad JSON: {e}")
    return rows


def main():
    corpus = load("corpus.jsonl")
    questions = load("questions.jsonl")
    failures = []

    ids = [p["id"] for p in corpus]
    if len(ids) != len(set(ids)):
        failures.append("duplicate paragraph ids")
    by_id = {p["id"]: p for p in corpus}
    essays = Counter(p["essay"] for p in corpus)
    wc = [len(p["text"].split()) for p in corpus]
    print(f"paragraphs: {len(corpus)}")
    print(f"essays: {len(essays)} (paragraphs per essay min {min(essays.values())} max {max(essays.values())})")
    print(f"questions: {len(questions)}")
    print(f"words per paragraph: min {min(wc)} median {statistics.median(wc)} max {max(wc)}")
    kinds = Counter(q.get("kind") for q in questions)
    print("question kinds: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    per_essay = Counter(a.split("/")[0] for q in questions for a in set(q["answer_ids"]))
    print(f"essays with answers: {len(per_essay)} (max questions per essay {max(per_essay.values()) if per_essay else 0})")

    if len(corpus) < 300:
        failures.append(f"paragraphs {len(corpus)} < 300")
    if len(questions) < 50:
        failures.append(f"questions {len(questions)} < 50")

    overlaps, violations = [], []
    for q in questions:
        missing = [a for a in q["answer_ids"] if a not in by_id]
        if missing:
            failures.append(f"{q['id']}: answer ids not in corpus: {missing}")
            continue
        qw = set(terms(q["question"]))
        aw = set()
        for a in q["answer_ids"]:
            aw |= set(terms(by_id[a]["text"]))
        ov = len(qw & aw) / len(qw) if qw else 0.0
        overlaps.append(ov)
        if ov > 0.5:
            violations.append((q["id"], ov, sorted(qw & aw)))
    print(f"content-word overlap question->answer: max {max(overlaps):.2f} mean {statistics.mean(overlaps):.2f}")
    if violations:
        print("overlap violations (> 0.50):")
        for qid, ov, shared in violations:
            print(f"  {qid} {ov:.2f} {shared}")
        failures.append(f"{len(violations)} questions with overlap > 0.5")
    else:
        print("overlap violations (> 0.50): none")

    bm = BM25([terms(p["text"]) for p in corpus])
    h1 = h3 = rr = e3 = 0.0
    essay_of = [p["essay"] for p in corpus]
    for q in questions:
        sc = bm.scores(terms(q["question"]))
        order = sorted(range(len(corpus)), key=lambda i: -sc[i])
        gold = set(q["answer_ids"])
        rank = next((r for r, i in enumerate(order, 1) if ids[i] in gold), None)
        if rank == 1:
            h1 += 1
        if rank and rank <= 3:
            h3 += 1
        if rank:
            rr += 1 / rank
        gold_essays = {a.split("/")[0] for a in gold}
        if any(essay_of[i] in gold_essays for i in order[:3]):
            e3 += 1
    n = len(questions)
    print(f"BM25 (paragraph = document, k1=1.5 b=0.75): hit@1 {h1 / n:.3f} hit@3 {h3 / n:.3f} MRR {rr / n:.3f}")
    print(f"BM25 essay-level hit@3 (any of the top-3 paragraphs from the answer's essay; info only): {e3 / n:.3f}")
    if h3 / n > 0.75:
        failures.append(f"BM25 hit@3 {h3 / n:.3f} > 0.75 (set too easy)")

    if failures:
        print("FAIL:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
