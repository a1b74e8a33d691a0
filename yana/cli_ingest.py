"""CLI commands for ingestion: `yana ingest`, `yana dedup-report`, `yana reembed`,
`yana collections list|drop`. Registered on the main typer app by yana.cli (register(app)).

`ingest` talks to the API (so auth, limits and idempotency apply as for any client): it sends the
folder in multipart batches, several in flight, follows each job with `Prefer: wait`, and shows a
live bar (done/total, rate, ETA, dedups, failures); it exits 1 if any item failed.
`dedup-report` reads Redis and the data folder directly (run it where the data lives).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import io
import json
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Annotated, Optional

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif"}
FIELDS = ("category", "brand_name", "product_name", "brewery", "region", "label_features", "text")

console = Console(stderr=True)
out = Console()

ApiOpt = Annotated[Optional[str], typer.Option("--api", envvar="YANA_API_URL", help="API base URL (default: API_HOST:API_PORT)")]
TokenOpt = Annotated[Optional[str], typer.Option("--token", envvar="YANA_API_TOKEN", help="bearer token when auth is on")]


def _client(api: str | None, token: str | None, timeout: float = 120.0) -> httpx.Client:
    from yana.settings import get_settings

    s = get_settings()
    base = api or f"http://{s.api_host}:{s.api_port}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=base, headers=headers, timeout=timeout, trust_env=False)


def _fail(resp: httpx.Response) -> None:
    try:
        err = resp.json()["error"]
        msg = f"{err['code']}: {err['message']}"
    except Exception:
        msg = resp.text[:300]
    console.print(f"[red]HTTP {resp.status_code}[/red] {msg}")
    raise typer.Exit(2)


def wait_job(client: httpx.Client, job_id: str, on_progress=None, poll_s: int = 10) -> dict:
    while True:
        r = client.get(f"/v1/jobs/{job_id}", headers={"Prefer": f"wait={poll_s}"})
        if r.status_code != 200:
            _fail(r)
        job = r.json()
        if on_progress and job.get("progress"):
            on_progress(job["progress"])
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job


# --- ingest ----------------------------------------------------------------------------------


def find_images(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def load_meta(path: Path | None) -> dict[str, dict]:
    """labels.csv / labels.jsonl rows keyed by their `file` column (path relative to the folder or
    a bare file name). label_features: a JSON list or a 、/,-separated string."""
    if path is None:
        return {}
    rows: list[dict] = []
    if path.suffix.lower() == ".jsonl":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    elif path.suffix.lower() == ".csv":
        with path.open(encoding="utf-8-sig", newline="") as f:
            rows = list(csv.DictReader(f))
    else:
        raise typer.BadParameter("--meta must be a .csv or .jsonl file")
    out_rows = {}
    for row in rows:
        key = str(row.get("file") or row.get("path") or "").strip()
        if key:
            out_rows[key] = {k: v for k, v in row.items() if k in FIELDS and v not in (None, "")}
    return out_rows


def _meta_for(p: Path, root: Path, meta: dict[str, dict]) -> dict:
    rel = p.relative_to(root).as_posix() if root.is_dir() else p.name
    return meta.get(rel) or meta.get(p.name) or {}


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.indexed = self.dedup = self.failed = 0
        self.failures: list[tuple[str, str]] = []

    def add(self, name: str, outcome: dict) -> None:
        with self.lock:
            if outcome.get("error"):
                self.failed += 1
                err = outcome["error"]
                self.failures.append((name, f"{err.get('code')}: {err.get('message')}"))
            elif outcome.get("dedup"):
                self.dedup += 1
            else:
                self.indexed += 1


def _send_batch(client: httpx.Client, batch: list[Path], root: Path, meta: dict, defaults: dict, strict: bool) -> list[dict]:
    """POST one batch, follow its job; returns one outcome per file (in order)."""
    files, items = [], []
    digest = hashlib.sha256()
    for p in batch:
        data = p.read_bytes()
        digest.update(p.name.encode() + hashlib.sha1(data).digest())
        files.append(("files", (p.name, data, "application/octet-stream")))
        m = _meta_for(p, root, meta)
        items.append({**m, "name": str(p)})
    form = {k: v for k, v in defaults.items() if v}
    form["items"] = json.dumps(items, ensure_ascii=False)
    if strict:
        form["strict"] = "true"
    # Same files, same key: a re-run after a dropped connection does not create a second job.
    headers = {"Idempotency-Key": "yana-cli-" + digest.hexdigest()}
    for attempt in range(5):
        try:
            r = client.post("/v1/ingest", files=files, data=form, headers=headers)
        except httpx.TransportError as exc:
            if attempt == 4:
                return [{"error": {"code": "NETWORK", "message": str(exc)}} for _ in batch]
            time.sleep(2**attempt)
            continue
        if r.status_code == 429 or (r.status_code == 409 and "in progress" in r.text.lower()):
            time.sleep(float(r.headers.get("Retry-After") or 1))
            continue
        break
    if r.status_code == 200:  # one file, already indexed: answered at once
        return [{**r.json(), "dedup": True}]
    if r.status_code != 202:
        try:
            err = r.json()["error"]
        except Exception:
            err = {"code": f"HTTP_{r.status_code}", "message": r.text[:200]}
        return [{"error": err} for _ in batch]
    job = wait_job(client, r.json()["job_id"])
    if job["status"] != "succeeded":
        err = job.get("error") or {"code": job["status"].upper(), "message": job["status"]}
        return [{"error": err} for _ in batch]
    outcomes = job["result"]["items"]
    return [outcomes[i] if i < len(outcomes) else {"error": {"code": "MISSING", "message": "no outcome"}} for i in range(len(batch))]


def ingest(
    path: Annotated[Path, typer.Argument(exists=True, help="an image file or a folder (searched recursively)")],
    category: Annotated[Optional[str], typer.Option(help="sake | juice, for files the --meta file does not classify")] = None,
    meta: Annotated[Optional[Path], typer.Option("--meta", exists=True, dir_okay=False, help="labels.csv or .jsonl: file + label fields")] = None,
    brand_name: Annotated[Optional[str], typer.Option(help="default brand for every file")] = None,
    brewery: Annotated[Optional[str], typer.Option(help="default brewery / maker")] = None,
    region: Annotated[Optional[str], typer.Option(help="default region")] = None,
    batch_size: Annotated[int, typer.Option("--batch", min=1, max=500, help="files per request (one job each)")] = 16,
    parallel: Annotated[int, typer.Option(min=1, max=16, help="requests in flight")] = 2,
    strict: Annotated[bool, typer.Option(help="exact duplicates are errors (409)")] = False,
    api: ApiOpt = None,
    token: TokenOpt = None,
) -> None:
    """Ingest a folder of label images through the API, with a live progress bar and a summary."""
    root = path.resolve()
    files = find_images(root)
    if not files:
        console.print(f"no images (.jpg .png .webp .gif) under {root}")
        raise typer.Exit(2)
    meta_rows = load_meta(meta)
    defaults = {"category": category, "brand_name": brand_name, "brewery": brewery, "region": region}
    if not category and not all(_meta_for(p, root, meta_rows).get("category") for p in files):
        raise typer.BadParameter("give --category (or a category column in --meta for every file)")
    batches = [files[i : i + batch_size] for i in range(0, len(files), batch_size)]
    tally = Tally()
    started = time.monotonic()
    columns = (
        TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
        TextColumn("{task.fields[rate]:.1f} img/s"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
        TextColumn("dedup [yellow]{task.fields[dedup]}[/]  failed [red]{task.fields[failed]}[/]"),
    )
    with _client(api, token) as client, Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("ingest", total=len(files), rate=0.0, dedup=0, failed=0)
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            futures = {pool.submit(_send_batch, client, b, root, meta_rows, defaults, strict): b for b in batches}
            for fut in as_completed(futures):
                batch = futures[fut]
                try:
                    outcomes = fut.result()
                except Exception as exc:  # noqa: BLE001 - one batch's crash must not hide the others
                    outcomes = [{"error": {"code": "CLIENT_ERROR", "message": f"{type(exc).__name__}: {exc}"}} for _ in batch]
                for p, o in zip(batch, outcomes):
                    tally.add(str(p.relative_to(root) if root.is_dir() else p.name), o)
                done = tally.indexed + tally.dedup + tally.failed
                progress.update(bar, completed=done, rate=done / max(1e-6, time.monotonic() - started),
                                dedup=tally.dedup, failed=tally.failed)
    elapsed = time.monotonic() - started
    table = Table(title="ingest summary")
    for col in ("total", "indexed", "dedup", "failed", "elapsed s", "images/s"):
        table.add_column(col, justify="right")
    total = tally.indexed + tally.dedup + tally.failed
    table.add_row(str(total), str(tally.indexed), str(tally.dedup), str(tally.failed), f"{elapsed:.1f}", f"{total / max(elapsed, 1e-6):.1f}")
    out.print(table)
    if tally.failures:
        ft = Table(title=f"failures ({len(tally.failures)})")
        ft.add_column("file")
        ft.add_column("error")
        for name, err in tally.failures[:50]:
            ft.add_row(name, err)
        out.print(ft)
        raise typer.Exit(1)


# --- dedup report --------------------------------------------------------------------------


def _thumb(path: Path, size: int = 160) -> str:
    from PIL import Image

    try:
        with Image.open(path) as im:
            im.thumbnail((size, size))
            buf = io.BytesIO()
            im.convert("RGB").save(buf, format="JPEG", quality=80)
        return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
    except Exception:
        return ""


def build_dedup_report(r, data_dir: Path) -> tuple[str, int, int]:
    """HTML of near-duplicate groups: the indexed image, then each duplicate with its distance."""
    from pipelines.ingest import DUPS_KEY
    from pipelines.phash_index import all_entries

    labels = all_entries(r)
    groups: dict[str, list[dict]] = defaultdict(list)
    for sha1, raw in r.hscan_iter(DUPS_KEY, count=1000):
        d = json.loads(raw)
        groups[d["dedup_of"]].append({**d, "sha1": sha1})
    parts = [
        "<!doctype html><meta charset='utf-8'><title>yana near-duplicate report</title>",
        "<style>body{font-family:sans-serif;margin:1em}section{border-bottom:1px solid #ccc;padding:.5em 0}"
        "figure{display:inline-block;margin:.3em;text-align:center;font-size:12px;vertical-align:top}"
        "img{max-width:160px;max-height:160px;border:1px solid #999}.kept img{border:3px solid #2a2}</style>",
        f"<h1>Near-duplicate groups</h1><p>{len(groups)} groups, {sum(len(v) for v in groups.values())} duplicates.</p>",
    ]
    for label_id, dups in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        kept = labels.get(label_id, {})
        parts.append(f"<section><h2>{html.escape(label_id)} <small>({len(dups)} duplicates)</small></h2>")
        src = _thumb(data_dir / kept["file_path"]) if kept.get("file_path") else ""
        parts.append(f"<figure class='kept'><img src='{src}' alt='{html.escape(label_id)}'><figcaption>kept<br>"
                     f"pHash {html.escape(kept.get('phash', ''))}</figcaption></figure>")
        for d in sorted(dups, key=lambda x: x["distance"]):
            src = _thumb(data_dir / d["file_path"]) if d.get("file_path") else ""
            parts.append(f"<figure><img src='{src}' alt='{html.escape(d['sha1'][:12])}'><figcaption>distance "
                         f"<b>{d['distance']}</b><br>pHash {html.escape(d.get('phash') or '')}</figcaption></figure>")
        parts.append("</section>")
    return "\n".join(parts), len(groups), sum(len(v) for v in groups.values())


def dedup_report(
    output: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write")] = Path("dedup-report.html"),
) -> None:
    """Write an HTML page of near-duplicate groups (thumbnails and Hamming distances)."""
    from yana.clients import get_redis
    from yana.settings import get_settings

    page, n_groups, n_dups = build_dedup_report(get_redis(), get_settings().data_dir)
    output.write_text(page, encoding="utf-8")
    out.print(f"{n_groups} groups, {n_dups} duplicates → {output}")


# --- re-embedding and collections ----------------------------------------------------------


def reembed(
    model: Annotated[str, typer.Option("--model", help="embedding model to re-embed every stored text with")],
    wait: Annotated[bool, typer.Option(help="follow the job to its end")] = True,
    api: ApiOpt = None,
    token: TokenOpt = None,
) -> None:
    """Build a collection for MODEL from the stored texts, then swap the active alias."""
    with _client(api, token) as client:
        r = client.post("/v1/reembed", json={"model": model})
        if r.status_code != 202:
            _fail(r)
        job_id = r.json()["job_id"]
        out.print(f"job {job_id}")
        if not wait:
            return
        with Progress(TextColumn("[bold]reembed"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TimeRemainingColumn(), console=console) as progress:
            bar = progress.add_task("reembed", total=None)
            job = wait_job(client, job_id, lambda p: progress.update(bar, completed=p["done"], total=p["total"] or None), poll_s=2)
    if job["status"] != "succeeded":
        console.print(f"[red]{job['status']}[/red] {job.get('error')}")
        raise typer.Exit(1)
    res = job["result"]
    out.print(f"active collection: {res['target']} ({res['count']} chunks, {res['model']}, dim {res['dim']}); "
              f"previous: {res['source']} (drop it with `yana collections drop {res['source']}`)")


collections_app = typer.Typer(help="Vector collections (one per embedding model and version).", no_args_is_help=True)


@collections_app.command("list")
def collections_list(api: ApiOpt = None, token: TokenOpt = None) -> None:
    """List collections with model, dimension, size; mark the active one."""
    with _client(api, token) as client:
        r = client.get("/v1/collections")
        if r.status_code != 200:
            _fail(r)
    body = r.json()
    t = Table(title="collections")
    for col in ("name", "model", "dim", "count", "state"):
        t.add_column(col)
    for c in body["collections"]:
        state = "active" if c["active"] else ("building" if c["name"] == body.get("building") else "")
        t.add_row(c["name"], str(c["model"]), str(c["dim"]), str(c["count"]), state)
    out.print(t)


@collections_app.command("drop")
def collections_drop(name: str, api: ApiOpt = None, token: TokenOpt = None) -> None:
    """Delete a collection that is not active (e.g. the one a re-embed replaced)."""
    with _client(api, token) as client:
        r = client.delete(f"/v1/collections/{name}")
        if r.status_code != 200:
            _fail(r)
    out.print(f"dropped {name}")


def sample_labels(
    out: Annotated[Path, typer.Argument(help="folder to write the images and labels.jsonl into")],
    n: Annotated[int, typer.Option(min=1, max=100_000, help="distinct labels")] = 50,
    variants: Annotated[int, typer.Option(min=0, max=6, help="near-duplicate variants per label")] = 1,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Write synthetic sake/juice label images (Japanese text) and a labels.jsonl for --meta,
    to try `yana ingest OUT --meta OUT/labels.jsonl`."""
    from yana.datagen.images import write_dataset

    rows = write_dataset(out, n, seed=seed, n_variants=variants)
    with (out / "labels.jsonl").open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({k: v for k, v in row.items() if k not in ("params",)}, ensure_ascii=False) + "\n")
    console.print(f"wrote {len(rows)} images ({n} labels, {variants} variant(s) each) and labels.jsonl to {out}")


def register(app: typer.Typer) -> None:
    app.command("sample-labels")(sample_labels)
    app.command("ingest")(ingest)
    app.command("dedup-report")(dedup_report)
    app.command("reembed")(reembed)
    app.add_typer(collections_app, name="collections")
