"""Append essays from a plain-text batch file to corpus.jsonl.

Batch format: a line '@@ slug | 日本語タイトル' starts an essay; every following
non-empty line is one paragraph. Validates each JSON line it writes.
"""
import json, sys, os
HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus.jsonl")

def main(path):
    seen = set()
    if os.path.exists(CORPUS):
        for line in open(CORPUS, encoding="utf-8"):
            seen.add(json.loads(line)["essay"])
    essays, cur = [], None
    for raw in open(path, encoding="utf-8"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("@@"):
            slug, title = [x.strip() for x in line[2:].split("|", 1)]
            cur = (slug, title, []); essays.append(cur)
        else:
            cur[2].append(line)
    bad = False
    for slug, title, paras in essays:
        if slug in seen:
            print("duplicate essay", slug); bad = True
        if not (8 <= len(paras) <= 14):
            print(slug, "has", len(paras), "paragraphs"); bad = True
        for i, p in enumerate(paras, 1):
            if not (120 <= len(p) <= 350):
                print(f"{slug}/p{i:02d} length {len(p)}"); bad = True
    if bad:
        sys.exit(1)
    with open(CORPUS, "a", encoding="utf-8") as f:
        for slug, title, paras in essays:
            for i, p in enumerate(paras, 1):
                line = json.dumps({"id": f"{slug}/p{i:02d}", "essay": slug, "title": title, "text": p}, ensure_ascii=False)
                json.loads(line)
                f.write(line + "\n")
            print("added", slug, len(paras))

if __name__ == "__main__":
    main(sys.argv[1])
