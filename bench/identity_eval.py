"""Label identity from what the label says (issue 21 item 3), through the real ingest body.

    .venv/bin/python bench/identity_eval.py [--split heldout] [--seed 7] [--labels 60] [--families 3]
                                            [--per-family 6] [--quick] [--why]

`--why` counts, per mode, the verdict behind each missed re-photograph (the one its first
photograph's label got, or "not a candidate") and each false merge; counts only, so it can be run
on held-out seeds without looking at their photographs.

Data (tools.photolabels, a generator independent of tools/datagen and bench/neardup_eval.py;
numbers are reported on split "heldout", limits were chosen on split "tune"):

- re-photographs: `--labels` random labels, each photographed twice with independent draws
  (perspective, rotation <= 5 deg, glare, blur, scale 0.3-2x, JPEG >= q40); the first uncropped,
  the second cropped 2-8 % off one side or corner;
- shared designs: per kind of difference (brand | grade | number: 精米歩合, アルコール分 or
  内容量), `--families` product lines of `--per-family` labels printed from one design where only
  that differs (tools.photolabels.design_family), each photographed once;
- editions: `--families` sets of `--per-family` labels with the same text in other designs
  (vary "design": what they say agrees, only the picture tells them apart).

Protocol, as a user would ingest: one job with every distinct label (the first photographs and
the product lines, interleaved), then one job with the second photographs. Through
`pipelines.ingest.pipeline.run_ingest` with a private redis-server, a Chroma PersistentClient in
a temp folder, OCR_MODE=auto and the real reader (OCR_ENGINE default). recall = share of second
photographs merged into their first's label; false merges = distinct labels merged into another
label (plus second photographs merged into a wrong label, counted apart).

Modes: images only (category), brand only (category + brand_name), full fields (category,
brand_name, product_name, brewery). Between modes everything in Redis but the reading cache is
deleted and Chroma starts empty, so each photograph is read once (the cache is keyed by the
image's sha1, as in production) and every mode decides from the same readings. So full fields
after another mode finds every photograph read; alone (`--modes full`) it runs with the reads
deferred (pipelines.ingest.deferred: a photograph is read only when its decision needs it), and
the last column counts the labels indexed unread.
"""

from __future__ import annotations

import argparse
import difflib
import io
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PIL import Image  # noqa: E402

BARS = {"images": (0.95, 0.002), "brand": (0.97, 0.0), "full": (0.99, 0.0)}
MODES = ("images", "brand", "full")
# Product lines: one design printed with another brand, grade or number; and one text printed in
# other designs (editions: the read text agrees, only the picture tells them apart).
VARY = ("brand", "grade", "number", "design")


def _jpeg(img: Image.Image) -> bytes:
    """The photograph's bytes as photolabels encoded them (same quantisation tables)."""
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality="keep")
    return buf.getvalue()


def build(split: str, seed: int, n_labels: int, families: int, per_family: int) -> dict:
    from tools.photolabels import design_family, make_spec, photograph, render

    rng = random.Random(f"identity:{split}:{seed}")
    firsts, seconds, family = [], [], []
    for i in range(n_labels):
        spec = make_spec(rng, split=split, key=f"re-{i}")
        img = render(spec).image
        a, _pa = photograph(img, random.Random(rng.getrandbits(64)), crop=0)
        b, pb = photograph(img, random.Random(rng.getrandbits(64)), crop=1.0)
        firsts.append({"key": spec.key, "spec": spec, "data": _jpeg(a)})
        seconds.append({"key": spec.key, "spec": spec, "data": _jpeg(b), "crop": pb["crop"]})
    for vary in VARY:
        for f in range(families):  # prefix: one product line per (vary, f)
            for spec in design_family(rng, per_family, split=split, vary=vary, prefix=f"{vary}{f}"):
                img, _p = photograph(render(spec).image, random.Random(rng.getrandbits(64)))
                family.append({"key": spec.key, "spec": spec, "data": _jpeg(img), "vary": vary})
    # distinct labels interleaved, so product lines are not ingested back to back only
    distinct = firsts + family
    random.Random(seed).shuffle(distinct)
    return {"distinct": distinct, "seconds": seconds}


def fields_for(spec, mode: str) -> dict:
    out = {"category": "juice" if spec.kind == "juice" else "sake"}
    if mode in ("brand", "full"):
        out["brand_name"] = spec.brand
    if mode == "full":
        out.update(product_name=spec.product_name or None, brewery=spec.brewery)
    return out


def _stage(data_dir: Path, job: str, i: int, data: bytes) -> dict:
    p = data_dir / "incoming" / job / f"{i}.jpg"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return {"kind": "stored", "path": f"incoming/{job}/{i}.jpg"}


def _reset(r) -> None:
    """Everything but the reading cache (yana:read:{sha1})."""
    doomed = [k for k in r.scan_iter(count=1000) if not (k.startswith("yana:read:") and ":lock:" not in k)]
    for i in range(0, len(doomed), 500):
        r.delete(*doomed[i : i + 500])


class _Judged:
    """Every verifier ingest makes in this process, by the blob key of its image (what --why reads:
    the verdict each candidate got). Installed over pipelines.ingest.pipeline's verifier_for."""

    def __init__(self):
        from pipelines.ingest import pipeline as ingest

        self.module, self.made = ingest.neardup, {}
        self.real = self.module.verifier_for

    def __enter__(self):
        def wrapped(*a, **kw):
            out = self.real(*a, **kw)
            self.made[kw.get("blob_key", "")] = out[2]
            return out

        self.module.verifier_for = wrapped
        return self

    def __exit__(self, *_exc):
        self.module.verifier_for = self.real


def _reason(text: str) -> str:
    """A verdict's reason without its numbers (so like verdicts count together)."""
    import re

    return re.sub(r"[-+]?\d+(\.\d+)?", "#", text)


def why_missed(missed: list, label_of: dict, firsts: dict, judged: dict) -> dict[str, int]:
    """Why each missed re-photograph was not merged into its first photograph's label, counted by
    kind: not a candidate (split by what was read as the brand on the two photographs), or the
    verdict the first's label got. Counts only: held-out photographs are not looked at one by one."""
    from pipelines.neardup import decision

    counts: dict[str, int] = {}
    for x, o in missed:
        v = judged.get(o.get("file_path") or "")
        if v is None:
            kind = "no verdict (an error or an exact copy)"
        else:
            row = next((j for j in v.judged if j["label_id"] == label_of[x["key"]]), None)
            if row is not None:
                kind = "judged: " + _reason(row["reason"])
            else:
                first = judged.get(firsts.get(x["key"], ""))
                a = decision.read_value((v.said or {}).get("brand_name"))
                b = decision.read_value(((first.said if first else None) or {}).get("brand_name"))
                if not a or not b:
                    kind = "not a candidate: no brand read on " + ("either" if not a and not b else "one")
                elif decision.brands_alike(a, b):
                    kind = "not a candidate: brands read alike"
                else:
                    kind = "not a candidate: brands read apart"
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def why_merged(false_merged: list, judged: dict) -> dict[str, int]:
    """The verdict that merged each distinct label into another (counts by kind)."""
    counts: dict[str, int] = {}
    for x, o in false_merged:
        v = judged.get(o.get("file_path") or "")
        row = next((j for j in (v.judged if v else []) if j["label_id"] == o["id"] and j["same"]), None)
        kind = f"{x.get('vary') or 'random'}: " + (_reason(row["reason"]) if row else "no verdict (an exact copy)")
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def print_why(rows: list[dict]) -> None:
    print("\nwhy re-photographs were missed (counts; the verdict the first photograph's label got):")
    for row in rows:
        for kind, n in sorted(row["why"].items(), key=lambda kv: -kv[1]):
            print(f"  {row.get('label', row['mode'])}: {n} x {kind}")
    print("why distinct labels were merged (counts; product line kind: the verdict that merged):")
    for row in rows:
        for kind, n in sorted(row["why_merged"].items(), key=lambda kv: -kv[1]):
            print(f"  {row.get('label', row['mode'])}: {n} x {kind}")


def run_mode(mode: str, data: dict, *, r, s, tmp: Path) -> dict:
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    from pipelines.ingest import pipeline as ingest

    _reset(r)
    watch = _Judged()
    chroma = chromadb.PersistentClient(
        path=str(tmp / f"chroma-{mode}-{time.monotonic_ns()}"), settings=ChromaSettings(anonymized_telemetry=False)
    )
    t0 = time.monotonic()
    out: dict = {}
    for part in ("distinct", "seconds"):
        job = ingest.LocalJob(f"id-{mode}-{part}")
        items = [
            {
                "index": i,
                "name": f"{x['key']}.jpg",
                "source": _stage(s.data_dir, job.job_id, i, x["data"]),
                "fields": fields_for(x["spec"], mode),
            }
            for i, x in enumerate(data[part])
        ]
        with watch:
            res = ingest.run_ingest(job, items=items, r=r, chroma=chroma, s=s)
        out[part] = res["items"]
    dist = out["distinct"]
    label_of = {x["key"]: o["id"] for x, o in zip(data["distinct"], dist, strict=True)}
    false_merged = [(x, o) for x, o in zip(data["distinct"], dist, strict=True) if o.get("dedup")]
    hits = wrong = 0
    missed = []
    for x, o in zip(data["seconds"], out["seconds"], strict=True):
        if o.get("dedup") and o["id"] == label_of[x["key"]]:
            hits += 1
        elif o.get("dedup"):
            wrong += 1
        else:
            missed.append((x, o))
    n_sec = len(data["seconds"])
    return {
        "mode": mode,
        "recall": hits / n_sec if n_sec else float("nan"),
        "n_seconds": n_sec,
        "false": len(false_merged),
        "n_distinct": len(dist),
        "wrong": wrong,
        "false_examples": [
            (x["key"], x.get("vary", ""), o.get("dedup_of"), o.get("verifier_score")) for x, o in false_merged[:5]
        ],
        "missed": len(missed),
        "why": why_missed(
            missed,
            label_of,
            {x["key"]: o.get("file_path") or "" for x, o in zip(data["distinct"], dist, strict=True)},
            watch.made,
        ),
        "why_merged": why_merged(false_merged, watch.made),
        "warnings": sum(len(o.get("warnings") or []) for o in dist + out["seconds"]),
        # indexed unread: the read deferred to the background pass (OCR_MODE=auto, full fields)
        "deferred": sum(1 for o in dist + out["seconds"] if o.get("read") == "deferred"),
        "wall_s": time.monotonic() - t0,
        "load": os.getloadavg()[0],
    }


def pair_scores(data: dict, r) -> None:
    """Diagnosis for choosing the limits (run it on the tune split): the grey-only verifier score of
    each re-photographed pair whose read text agrees, and of each distinct pair in one product line
    whose read text agrees (the pairs only the image can tell apart)."""
    from pipelines.ingest import readings
    from pipelines.neardup import decision, hashing, verifier

    def said(x):
        rd = readings.cached(r, hashing.sha1_hex(x["data"])) or {}
        return {k: (f or {}).get("value") for k, f in (rd.get("fields") or {}).items() if k in decision.READ_KEYS}

    def loose(a, b):
        va = verifier.query_view(Image.open(io.BytesIO(a["data"])).convert("RGB"))
        vb = verifier.query_view(Image.open(io.BytesIO(b["data"])).convert("RGB"))
        return verifier.verify_many(va, [vb.sig], fields_agree=[True])[0]

    def text(x):
        return "".join(((readings.cached(r, hashing.sha1_hex(x["data"])) or {}).get("text") or "").split())

    def row(a, b):
        sa, sb = said(a), said(b)
        extra = sum(
            1
            for k in decision.READ_KEYS[1:]
            if decision._read_norm(sa.get(k)) and decision._read_norm(sa.get(k)) == decision._read_norm(sb.get(k))
        )
        sim = difflib.SequenceMatcher(None, text(a), text(b), autojunk=False).ratio()
        return {
            "score": round(min(loose(a, b), loose(b, a)), 3),
            "agrees": decision.text_agrees(sa, sb),
            "extra": extra,
            "sim": round(sim, 3),
        }

    first = {x["key"]: x for x in data["distinct"]}
    same = [row(x, first[x["key"]]) for x in data["seconds"]]
    fams: dict[str, list] = {}
    for x in data["distinct"]:
        if x["spec"].family:
            fams.setdefault(x["spec"].family + x["key"].split("-")[0], []).append(x)
    diff = []
    for members in fams.values():
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                diff.append({**row(a, b), "vary": a.get("vary")})
    for name, rows in (("re-photographed pairs (one label)", same), ("distinct pairs in a product line", diff)):
        agree = [x for x in rows if x["agrees"]]
        print(f"{name}: {len(rows)}, read text agrees on {len(agree)}")
        for x in sorted(agree, key=lambda x: x["score"]):
            print(
                f"    agrees: grey-only score {x['score']}, {x['extra']} fields besides the brand, text similarity {x['sim']}"
                + (f", differs in {x['vary']}" if x.get("vary") else "")
            )
        print(f"  text does not agree: scores {sorted(x['score'] for x in rows if not x['agrees'])}")


def picture_rows(modes: list[str], data: dict, *, r, s, tmp: Path) -> list[dict]:
    """Per mode, on the same readings, the decision as it was before each check: the aligned
    picture check off (and with it the printed-lines check); the printed-lines check off (the
    picture then merges where the text agrees only, PICTURE_ACCEPTS_UNAGREED off: the decision
    before the printed-lines check); the printed-lines check vetoing only (the picture merging
    where the text agrees only)."""
    from pipelines.neardup import decision

    rows = []
    saved = decision.PICTURE_ACCEPTS_UNAGREED
    try:
        for label, check, printed, unagreed in (
            ("picture check off", False, False, False),
            ("printed check off", True, False, False),
            ("printed check vetoes only", True, True, False),
        ):
            decision.PICTURE_ACCEPTS_UNAGREED = unagreed
            settings = s.model_copy(update={"neardup_picture_check": check, "neardup_printed_check": printed})
            for mode in modes:
                rows.append({**run_mode(mode, data, r=r, s=settings, tmp=tmp), "label": f"{mode} ({label})"})
                print(f"  {mode} {label}: done in {rows[-1]['wall_s']:.0f}s", flush=True)
    finally:
        decision.PICTURE_ACCEPTS_UNAGREED = saved
    return rows


def _use_brush_face(split: str, face: str) -> None:
    """Every brand of `split` drawn in `face` (a check set in neither split's faces)."""
    if face:
        from tools.photolabels.render import FONTS

        FONTS[split]["brush"] = [face]


def _set_limits(args) -> None:
    """The decision's limits, as the flags set them, printed."""
    from pipelines.neardup import decision, picture

    if args.text_limit is not None:
        decision.TEXT_AGREE_MAX_SCORE = args.text_limit
    if args.fields_text_differs_limit is not None:
        decision.FIELDS_AGREE_TEXT_DIFFERS_MAX_SCORE = args.fields_text_differs_limit
    if args.marks_limit is not None:
        picture.MAX_MARKS = args.marks_limit
    print(
        f"limits: picture marks {picture.MAX_MARKS}, text agrees {decision.TEXT_AGREE_MAX_SCORE}, "
        f"fields agree {decision.FIELDS_AGREE_MAX_SCORE} "
        f"({decision.FIELDS_AGREE_TEXT_DIFFERS_MAX_SCORE} when both were read and the text does not agree)"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="heldout", choices=("tune", "heldout"))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--labels", type=int, default=60, help="labels photographed twice")
    ap.add_argument("--families", type=int, default=3, help="product lines per kind of difference")
    ap.add_argument("--per-family", type=int, default=6)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument(
        "--text-limit", type=float, help="override decision.TEXT_AGREE_MAX_SCORE (-1: text agreeing loosens nothing)"
    )
    ap.add_argument(
        "--fields-text-differs-limit", type=float, help="override decision.FIELDS_AGREE_TEXT_DIFFERS_MAX_SCORE"
    )
    ap.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="MODE:TEXT_LIMIT:FIELDS_LIMIT",
        help="one more row on the same readings with other limits (e.g. images:-1:4 = text path off, before issue 21 item 3)",
    )
    ap.add_argument(
        "--sure-only",
        action="store_true",
        help="one more row per mode on the same readings, agreement judged on surely read values only (before)",
    )
    ap.add_argument(
        "--no-picture-check",
        dest="picture_check",
        action="store_false",
        help="the aligned picture check off (NEARDUP_PICTURE_CHECK; on by default) for the main rows",
    )
    ap.add_argument(
        "--picture-rows",
        action="store_true",
        help="per mode, three more rows on the same readings: the aligned picture check off, the"
        " printed-lines check off (the decision before it), the printed-lines check vetoing only"
        " (no merge on consistent text)",
    )
    ap.add_argument(
        "--why", action="store_true", help="count why re-photographs were missed (kinds, no photograph shown)"
    )
    ap.add_argument("--scores", action="store_true", help="print the pair scores used to choose the limits")
    ap.add_argument("--quick", action="store_true", help="CI size: 3 labels, one product line of 2 per kind")
    ap.add_argument(
        "--marks-limit",
        type=float,
        default=None,
        help="the picture check's marks limit (pipelines.neardup.picture.MAX_MARKS); inf: without the marks test",
    )
    ap.add_argument(
        "--brush-face",
        default="",
        help="draw every brand in this face (a path under /usr/share/fonts), e.g. a check set in neither split:"
        " truetype/kouzan-mouhitsu/kouzan-mouhitsu-gyosho.ttf",
    )
    args = ap.parse_args()
    _use_brush_face(args.split, args.brush_face)
    if args.quick:
        args.labels, args.families, args.per_family = 3, 1, 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import redis

    from cli import processes
    from pipelines.neardup import decision
    from tests.pipelines.ingest_support import build_tiny_st_model
    from yana.settings import get_settings

    _set_limits(args)
    t0 = time.monotonic()
    data = build(args.split, args.seed, args.labels, args.families, args.per_family)
    print(
        f"generated {len(data['distinct'])} distinct labels, {len(data['seconds'])} second photographs in {time.monotonic() - t0:.1f}s"
    )
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        with processes.private_redis(tmp) as svc:
            r = redis.Redis.from_url(svc.url, decode_responses=True)
            (tmp / "data").mkdir()
            (tmp / "imports").mkdir()
            s = get_settings().model_copy(
                update={
                    "data_dir": tmp / "data",
                    "import_dir": tmp / "imports",
                    "ocr_mode": "auto",
                    "ocr_timeout_s": 300,
                    "neardup_picture_check": args.picture_check,
                    # embedding is not what is measured: a tiny local model (no download)
                    "embed_model": build_tiny_st_model(tmp / "models"),
                }
            )
            rows = []
            for mode in args.modes.split(","):
                rows.append(run_mode(mode, data, r=r, s=s, tmp=tmp))
                print(f"  {mode}: done in {rows[-1]['wall_s']:.0f}s (load {rows[-1]['load']:.1f})", flush=True)
            for extra in args.extra:
                mode, tl, fl = extra.split(":")
                saved = decision.TEXT_AGREE_MAX_SCORE, decision.FIELDS_AGREE_TEXT_DIFFERS_MAX_SCORE
                decision.TEXT_AGREE_MAX_SCORE, decision.FIELDS_AGREE_TEXT_DIFFERS_MAX_SCORE = float(tl), float(fl)
                try:
                    rows.append({**run_mode(mode, data, r=r, s=s, tmp=tmp), "label": f"{mode} (limits {tl} / {fl})"})
                finally:
                    decision.TEXT_AGREE_MAX_SCORE, decision.FIELDS_AGREE_TEXT_DIFFERS_MAX_SCORE = saved
                print(f"  {extra}: done in {rows[-1]['wall_s']:.0f}s (load {rows[-1]['load']:.1f})", flush=True)
            if args.sure_only:
                # what ingest did before 2026-11-26: agreement judged on the sure values only
                from pipelines.ingest import readings

                said_fields = readings.said_fields
                readings.said_fields = readings.identity_fields  # type: ignore[assignment]
                try:
                    for mode in args.modes.split(","):
                        rows.append(
                            {**run_mode(mode, data, r=r, s=s, tmp=tmp), "label": f"{mode} (agree on sure values)"}
                        )
                        print(f"  {mode} sure-only: done in {rows[-1]['wall_s']:.0f}s", flush=True)
                finally:
                    readings.said_fields = said_fields  # type: ignore[assignment]
            rows += picture_rows(args.modes.split(","), data, r=r, s=s, tmp=tmp) if args.picture_rows else []
            if args.scores:
                pair_scores(data, r)
    load1 = os.getloadavg()
    print()
    print(
        f"identity eval, split={args.split} seed={args.seed}: {len(data['seconds'])} labels photographed twice, "
        f"{len(data['distinct']) - len(data['seconds'])} labels in {len(VARY) * args.families} product lines; "
        f"load average {load0[0]:.1f} before, {load1[0]:.1f} after"
    )
    print(
        "| mode | recall (n) | bar | false merges (n distinct) | bar | second photo into a wrong label | read warnings"
        " | read deferred |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        bar_r, bar_f = BARS[row["mode"]]
        print(
            f"| {row.get('label', row['mode'])} | {row['recall']:.3f} ({row['n_seconds']}) | >= {bar_r} | "
            f"{row['false']} = {row['false'] / max(1, row['n_distinct']):.2%} ({row['n_distinct']}) | <= {bar_f:.1%} | "
            f"{row['wrong']} | {row['warnings']} | {row['deferred']} |"
        )
    if args.why:
        print_why(rows)
    for row in rows:
        if row["false_examples"]:
            print(
                f"{row.get('label', row['mode'])}: false merges (key, product line, into, score): {row['false_examples']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
