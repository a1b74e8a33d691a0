"""Build the Python FAQ retrieve set from the Debian package python3.11-doc (the FAQ's reST sources).

    apt-get download python3.11-doc && dpkg-deb -x python3.11-doc_*.deb x
    python3 bench/evalsets/retrieve/pyfaq/build.py x/usr/share/doc/python3.11/html/_sources/faq

One document per FAQ entry: the answer's text (reST markup reduced to plain text, prose paragraphs
unwrapped, code blocks kept line by line, paragraphs separated by a blank line), without its
question. One question per entry: the entry's heading, as the FAQ's readers would ask it. Entries
whose answer is a pointer ("See the next question.") or shorter than MIN_CHARS are left out.
`evidence` is the answer's first paragraph (its first sentence when the paragraph is longer than
EVIDENCE_MAX chars): the ground-truth passage that answer-in-text@3 looks for in the returned texts.
Stdlib only; deterministic (files in FILES order, entries in file order).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

FILES = ("general", "programming", "design", "library", "extending", "windows", "gui", "installed")
MIN_CHARS = 200
EVIDENCE_MAX = 600
_UNDER = re.compile(r"^([=\-~^*#])\1{3,}\s*$")


def inline(s: str) -> str:
    s = re.sub(r":[a-z:]+:`~?([^`<]*?)\s*<[^>]*>`", r"\1", s)  # :ref:`text <target>`
    s = re.sub(r":[a-z:]+:`~([^`]*)`", lambda m: m.group(1).split(".")[-1], s)  # :func:`~os.path.join`
    s = re.sub(r":[a-z:]+:`!?([^`]*)`", r"\1", s)  # :class:`float`
    s = re.sub(r"`([^`<]*?)\s*<[^>]*>`__?", r"\1", s)  # `text <url>`_
    s = re.sub(r"``([^`]*)``", r"\1", s)
    s = re.sub(r"`([^`]*)`_?", r"\1", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"\1", s)
    s = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\1", s)
    s = s.replace("\\", "")
    return re.sub(r"[ \t]+", " ", s).strip()


def blocks(lines: list[str]) -> list[str]:
    """Paragraphs of an answer: prose unwrapped, literal blocks (after '::' or '>>>') line by line."""
    out: list[str] = []
    i, n = 0, len(lines)
    literal_next = False
    while i < n:
        if not lines[i].strip():
            i += 1
            continue
        para = []
        while i < n and lines[i].strip():
            para.append(lines[i])
            i += 1
        first = para[0]
        indented = first.startswith((" ", "\t"))
        if first.lstrip().startswith(".. "):  # a directive: its indented body follows
            head = first.strip()
            if head.startswith(("..  index", ".. index", ".. _", ".. only", ".. contents", ".. highlight")):
                literal_next = False
                continue
            if "code-block" in head or "doctest" in head or "testcode" in head:
                literal_next = True
                continue
            body = [p.strip() for p in para[1:] if not p.strip().startswith(":")]
            if body:
                out.append(inline(" ".join(body)))
            continue
        if (literal_next and indented) or first.lstrip().startswith(">>>"):
            out.append("\n".join(p.rstrip()[min(len(p) - len(p.lstrip()) for p in para if p.strip()) :] for p in para))
            literal_next = para[-1].rstrip().endswith("::")
            continue
        text = " ".join(p.strip() for p in para)
        literal_next = text.endswith("::")
        if literal_next:
            text = text[:-2].rstrip() + (":" if not text[:-2].rstrip().endswith(":") else "")
            if text == ":":
                continue
        text = re.sub(r"^[*\-+] ", "• ", text) if not indented else text
        out.append(inline(text))
    return [b for b in out if b.strip()]


def entries(path: Path) -> list[tuple[str, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    heads = [
        i
        for i in range(1, len(lines))
        if _UNDER.match(lines[i]) and lines[i - 1].strip() and not _UNDER.match(lines[i - 1])
    ]
    out = []
    for k, h in enumerate(heads):
        title = lines[h - 1].strip()
        end = heads[k + 1] - 1 if k + 1 < len(heads) else len(lines)
        if not title.endswith("?"):
            continue
        out.append((inline(title), "\n\n".join(blocks(lines[h + 1 : end]))))
    return out


def first_sentence(p: str) -> str:
    m = re.search(r"[.!?](?=\s)", p)
    return p[: m.end()] if m else p


def main() -> None:
    src = Path(sys.argv[1])
    here = Path(__file__).resolve().parent
    corpus, questions = [], []
    seen = set()
    for name in FILES:
        for title, answer in entries(src / f"{name}.rst.txt"):
            if len(answer) < MIN_CHARS or answer.lower().startswith("see ") or title in seen:
                continue
            seen.add(title)
            slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60]
            doc_id = f"{name}/{slug}"
            first = answer.split("\n\n")[0]
            evidence = first if len(first) <= EVIDENCE_MAX else first_sentence(first)
            corpus.append({"id": doc_id, "essay": name, "title": title, "text": answer})
            q = {"id": f"pyfaq-q{len(questions) + 1:03d}", "question": title, "answer_ids": [doc_id]}
            questions.append({**q, "evidence": [evidence], "kind": "faq"})
    (here / "corpus.jsonl").write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in corpus), "utf-8")
    (here / "questions.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions), "utf-8")
    lens = sorted(len(c["text"]) for c in corpus)
    print(f"{len(corpus)} entries; answer chars min {lens[0]} median {lens[len(lens) // 2]} max {lens[-1]}")


if __name__ == "__main__":
    main()
