"""The commands that work on a running instance's data: `yana ingest`, `yana dedup-report`,
`yana reembed`, `yana collections list|drop`, and `yana sample-labels` (writes local files only).
Registered on the main typer app by cli.main (register(app)).

Every data command goes through the HTTP API (auth, limits and idempotency apply as for any
client; see cli.api_link for how it finds the API). `ingest` sends the folder in multipart
batches, several in flight, each with an Idempotency-Key derived from its files, and follows each
job by its id; the counts come from the job records only. If the API goes away mid-run it retries
for --reconnect-s seconds and resumes following the jobs it already has; batches whose job it
could not follow are reported as unknown with their job ids, never as failed.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from cli.api_link import ApiLink, ApiOpt, ApiUnreachable, TokenOpt, fail, open_link, unreachable
from pipelines.labels.model import FIELD_NAMES

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif"}
FIELDS = FIELD_NAMES  # the metadata file's label columns
TERMINAL = ("succeeded", "failed", "cancelled")

console = Console(stderr=True)
out = Console()


def wait_job(link: ApiLink, job_id: str, on_progress=None, poll_s: int = 10) -> dict:
    """Follow a job to a terminal state with `Prefer: wait`; raises ApiUnreachable."""
    while True:
        r = link.request("GET", f"/v1/jobs/{job_id}", headers={"Prefer": f"wait={poll_s}"})
        if r.status_code != 200:
            fail(r)
        job = r.json()
        if on_progress and job.get("progress"):
            on_progress(job["progress"])
        if job["status"] in TERMINAL:
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
    return meta.get(_rel(p, root)) or meta.get(p.name) or {}


def _rel(p: Path, root: Path) -> str:
    return p.relative_to(root).as_posix() if root.is_dir() else p.name


@dataclass
class BatchResult:
    """What one batch came to. outcomes: one per file from the job record (or one error each when
    the API refused the request); job_id with outcomes None: sent, but its end was not seen."""

    files: list[Path]
    job_id: str | None = None
    replayed: bool = False
    resent: bool = False  # sent again in this run after a lost answer (a replay then is expected)
    outcomes: list[dict] | None = None
    unknown: str | None = None  # why the outcome is not known (API unreachable)


@dataclass
class Tally:
    indexed: int = 0
    dedup: int = 0
    failed: int = 0
    unknown: int = 0
    read_later: int = 0  # indexed with their read deferred (OCR_MODE=auto, full fields)
    failures: list[tuple[str, str]] = field(default_factory=list)
    merges: list[tuple[str, str, int | None]] = field(default_factory=list)  # file, merged into, distance
    jobs: list[tuple[str, str, int]] = field(default_factory=list)  # job id, "" | "earlier run" | "resent", files
    unknown_jobs: list[tuple[str | None, int, str]] = field(default_factory=list)
    # Files whose outcome came from an earlier run's job (Idempotency replay): counted, but not
    # processed now, so they are left out of the images/s rate.
    replayed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def done(self) -> int:
        return self.indexed + self.dedup + self.failed + self.unknown

    @property
    def known(self) -> int:
        """Files whose outcome is known (the bar's progress: never files not sent or not seen)."""
        return self.indexed + self.dedup + self.failed

    def rate(self, elapsed: float) -> float | None:
        """Images/s of the files processed in this run; None when there are none (a replay)."""
        fresh = self.known - self.replayed
        return fresh / max(elapsed, 1e-6) if fresh > 0 else None

    def add(self, res: BatchResult, root: Path) -> None:
        with self.lock:
            if res.job_id:
                replay = ("resent" if res.resent else "earlier run") if res.replayed else ""
                self.jobs.append((res.job_id, replay, len(res.files)))
            if res.outcomes is None:
                self.unknown += len(res.files)
                self.unknown_jobs.append((res.job_id, len(res.files), res.unknown or "unknown"))
                return
            if res.replayed and not res.resent:
                self.replayed += len(res.files)
            for p, o in zip(res.files, res.outcomes, strict=True):
                name = _rel(p, root)
                if o.get("error"):
                    self.failed += 1
                    err = o["error"]
                    self.failures.append((name, f"{err.get('code')}: {err.get('message')}"))
                elif o.get("dedup"):
                    self.dedup += 1
                    self.merges.append((name, o.get("dedup_of") or o.get("id") or "?", o.get("distance")))
                else:
                    self.indexed += 1
                    self.read_later += o.get("read") == "deferred"


def _batch_form(batch: list[Path], root: Path, meta: dict, defaults: dict, strict: bool):
    files, items = [], []
    digest = hashlib.sha256()
    for p in batch:
        data = p.read_bytes()
        digest.update(p.name.encode() + hashlib.sha1(data, usedforsecurity=False).digest())
        files.append(("files", (p.name, data, "application/octet-stream")))
        items.append({**_meta_for(p, root, meta), "name": _rel(p, root)})
    form = {k: v for k, v in defaults.items() if v}
    form["items"] = json.dumps(items, ensure_ascii=False)
    if strict:
        form["strict"] = "true"
    return files, form, "yana-cli-" + digest.hexdigest()


def _submit(link: ApiLink, batch: list[Path], root: Path, meta: dict, defaults: dict, strict: bool) -> BatchResult:
    """POST one batch (same files, same Idempotency-Key: a retry after a lost answer, or a re-run,
    gets the first job back instead of a second one)."""
    files, form, key = _batch_form(batch, root, meta, defaults, strict)
    while True:
        r = link.request("POST", "/v1/ingest", files=files, data=form, headers={"Idempotency-Key": key})
        if r.status_code == 429 or (r.status_code == 409 and (r.json().get("error") or {}).get("retryable")):
            time.sleep(float(r.headers.get("Retry-After") or 1))
            continue
        break
    res = BatchResult(batch, replayed=r.headers.get("idempotent-replayed") == "true", resent=link.last_retried())
    if r.status_code == 200:  # one file whose exact bytes are indexed: answered without a job
        res.outcomes = [{**r.json(), "dedup": True}]
    elif r.status_code == 202:
        res.job_id = r.json()["job_id"]
    else:
        try:
            err = r.json()["error"]
        except (ValueError, KeyError, TypeError):
            err = {"code": f"HTTP_{r.status_code}", "message": r.text[:200]}
        res.outcomes = [{"error": err} for _ in batch]
    return res


def _follow(link: ApiLink, res: BatchResult) -> BatchResult:
    """Outcomes from the job record, matched to files by item index. Runs in a pool thread, so it
    returns what happened instead of exiting (an exception here would lose the batch's count)."""
    while True:
        r = link.request("GET", f"/v1/jobs/{res.job_id}", headers={"Prefer": "wait=10"})
        if r.status_code == 429:
            time.sleep(float(r.headers.get("Retry-After") or 1))
            continue
        if r.status_code != 200:
            res.unknown = f"GET /v1/jobs/{res.job_id} answered {r.status_code}: {r.text[:200]}"
            return res
        job = r.json()
        if job["status"] in TERMINAL:
            break
    if job["status"] != "succeeded":
        err = job.get("error") or {"code": job["status"].upper(), "message": job["status"]}
        res.outcomes = [{"error": err} for _ in res.files]
        return res
    by_index = {o.get("index", i): o for i, o in enumerate(job["result"]["items"])}
    missing = {"error": {"code": "MISSING", "message": f"job {res.job_id} has no outcome for this file"}}
    res.outcomes = [by_index.get(i, missing) for i in range(len(res.files))]
    return res


def _run_batch(link: ApiLink, batch, root, meta, defaults, strict) -> BatchResult:
    """Submit and follow one batch. Never raises (a worker thread's exception would lose the
    batch's count): an API that stays away leaves the batch unknown, with its job id if it has one."""
    res = BatchResult(batch)
    try:
        res = _submit(link, batch, root, meta, defaults, strict)
        if res.job_id and res.outcomes is None:
            res = _follow(link, res)
    except ApiUnreachable as exc:
        res.unknown = str(exc)
    except Exception as exc:  # noqa: BLE001 - reported with the batch, never as a crash of the run
        res.unknown = f"{type(exc).__name__}: {exc}"
    return res


def _missing_category(files: list[Path], root: Path, meta: dict) -> list[str]:
    return [_rel(p, root) for p in files if not _meta_for(p, root, meta).get("category")]


def ingest(
    path: Annotated[Path, typer.Argument(exists=True, help="An image file, or a folder searched recursively.")],
    category: Annotated[
        Optional[str], typer.Option(help="sake or juice, for the files the --meta file gives no category.")
    ] = None,
    meta: Annotated[
        Optional[Path],
        typer.Option(
            "--meta", exists=True, dir_okay=False, help="labels.csv or labels.jsonl: a `file` column and label fields."
        ),
    ] = None,
    brand_name: Annotated[Optional[str], typer.Option(help="Default brand for every file.")] = None,
    brewery: Annotated[Optional[str], typer.Option(help="Default brewery or maker.")] = None,
    region: Annotated[Optional[str], typer.Option(help="Default region.")] = None,
    batch_size: Annotated[int, typer.Option("--batch", min=1, max=500, help="Files per request (one job each).")] = 16,
    parallel: Annotated[
        int,
        typer.Option(
            min=1, max=16, help="Batches in flight (about twice the worker processes keeps every one of them busy)."
        ),
    ] = 4,
    strict: Annotated[bool, typer.Option(help="Treat exact duplicates as errors (409).")] = False,
    reconnect_s: Annotated[
        float,
        typer.Option(
            min=0,
            help="How long to keep retrying when the API goes away mid-run or answers 408 (its time limit).",
        ),
    ] = 120.0,
    api: ApiOpt = None,
    token: TokenOpt = None,
) -> None:
    """Ingest label images through the API, with a live progress bar and a summary.

    Prints the job ids (to find them in Flower or GET /v1/jobs/ID), the near-duplicate merges and
    the failures. Exit code 0 when every file is indexed or merged, 1 when some failed or their
    outcome is unknown, 2 for bad arguments, 3 when the API cannot be reached.
    """
    root = path.resolve()
    files = find_images(root)
    if not files:
        console.print(f"no images (.jpg .png .webp .gif) under {root}")
        raise typer.Exit(2)
    meta_rows = load_meta(meta)
    if not category:
        lacking = _missing_category(files, root, meta_rows)
        if lacking:
            shown = ", ".join(lacking[:10]) + (f" and {len(lacking) - 10} more" if len(lacking) > 10 else "")
            console.print(
                f"[red]no category for {len(lacking)} of {len(files)} files:[/] {escape(shown)}. "
                "Give --category sake|juice, or a category column in --meta for each of them.",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(2)
    defaults = {"category": category, "brand_name": brand_name, "brewery": brewery, "region": region}
    batches = [files[i : i + batch_size] for i in range(0, len(files), batch_size)]
    link = open_link(api, token, reconnect_s=reconnect_s)
    tally = Tally()
    started = time.monotonic()
    columns = (
        TextColumn("[bold]ingest"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]} img/s"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("dedup [yellow]{task.fields[dedup]}[/]  failed [red]{task.fields[failed]}[/]{task.fields[unknown]}"),
    )
    with link, Progress(*columns, console=console, transient=False) as progress:
        link.say = progress.console.print
        bar = progress.add_task("ingest", total=len(files), rate="-", dedup=0, failed=0, unknown="")
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            futures = [pool.submit(_run_batch, link, b, root, meta_rows, defaults, strict) for b in batches]
            for fut in as_completed(futures):
                tally.add(fut.result(), root)
                rate = tally.rate(time.monotonic() - started)
                progress.update(
                    bar,
                    completed=tally.known,  # files not sent or not followed are never "done"
                    rate="-" if rate is None else f"{rate:.1f}",
                    dedup=tally.dedup,
                    failed=tally.failed,
                    unknown=f"  unknown [yellow]{tally.unknown}[/]" if tally.unknown else "",
                )
    _print_summary(tally, time.monotonic() - started, link)
    if tally.failed or tally.unknown:
        raise typer.Exit(1)


def _print_summary(tally: Tally, elapsed: float, link: ApiLink) -> None:
    table = Table(title="ingest summary")
    cols = ("total", "indexed", "dedup", "failed") + (("unknown",) if tally.unknown else ()) + ("elapsed s", "images/s")
    for col in cols:
        table.add_column(col, justify="right")
    counts = [tally.done, tally.indexed, tally.dedup, tally.failed] + ([tally.unknown] if tally.unknown else [])
    rate = tally.rate(elapsed)
    table.add_row(*map(str, counts), f"{elapsed:.1f}", "-" if rate is None else f"{rate:.1f}")
    out.print(table)
    if tally.read_later:
        out.print(
            f"{tally.read_later} label(s) sent with their brand, product and brewery are read after the ingest "
            "(a background pass, once ingest is idle): their read text and fields follow shortly",
            soft_wrap=True,
            highlight=False,
        )
    if tally.merges:
        mt = Table(title=f"near-duplicate merges ({len(tally.merges)})")
        mt.add_column("file")
        mt.add_column("merged into")
        mt.add_column("distance", justify="right")
        for name, into, dist in sorted(tally.merges)[:50]:
            mt.add_row(escape(name), into, "-" if dist is None else str(dist))
        out.print(mt)
    if tally.failures:
        ft = Table(title=f"failures ({len(tally.failures)})")
        ft.add_column("file")
        ft.add_column("error")
        for name, err in sorted(tally.failures)[:50]:
            ft.add_row(escape(name), escape(err))
        out.print(ft)
    out.print(f"jobs ({len(tally.jobs)}): " + " ".join(j for j, _r, _n in tally.jobs), soft_wrap=True, highlight=False)
    earlier = [j for j, rep, _n in tally.jobs if rep == "earlier run"]
    if earlier:
        out.print(
            f"{len(earlier)} of them were Idempotency replays: these files were sent before (same files, "
            "same key), so the counts are those of the earlier run's jobs: " + " ".join(earlier),
            soft_wrap=True,
            highlight=False,
        )
    resent = [j for j, rep, _n in tally.jobs if rep == "resent"]
    if resent:
        out.print(
            f"{len(resent)} batch(es) sent again after a lost connection were answered with the job of the "
            "first send (Idempotency replay, no second job): " + " ".join(resent),
            soft_wrap=True,
            highlight=False,
        )
    if link.outages:
        out.print(
            f"the API at {link.url} was unreachable {link.outages} time(s) during the run",
            highlight=False,
            soft_wrap=True,
        )
    for job_id, n, why in tally.unknown_jobs:
        where = f"job {job_id}" if job_id else "not submitted"
        out.print(f"[yellow]unknown[/]: {n} file(s), {where}: {escape(why)}", highlight=False, soft_wrap=True)
    if tally.unknown_jobs and any(j for j, _n, _w in tally.unknown_jobs):
        out.print("their jobs may still finish: `GET /v1/jobs/ID`, or run the same command again", highlight=False)


# --- dedup report --------------------------------------------------------------------------

_STYLE = (
    "<style>body{font-family:sans-serif;margin:1em}section{border-bottom:1px solid #ccc;padding:.5em 0}"
    "figure{display:inline-block;margin:.3em;text-align:center;font-size:12px;vertical-align:top;width:170px}"
    "figcaption{overflow-wrap:anywhere;word-break:break-word}"
    "img{max-width:160px;max-height:160px;border:1px solid #999}.kept img{border:3px solid #2a2}</style>"
)


def _figure(img: dict, caption: str, kept: bool = False) -> str:
    src = img.get("thumbnail") or ""
    alt = html.escape(img.get("file_name") or img.get("hash_sha1") or "")
    return (
        f"<figure{' class=kept' if kept else ''}><img src='{src}' alt='{alt}'>"
        f"<figcaption>{caption}</figcaption></figure>"
    )


def render_dedup_report(groups: list[dict], total_groups: int, total_dups: int, api_url: str) -> str:
    """HTML of near-duplicate groups: the kept label (brand, file, time), then each merged image
    with its file name, Hamming distance and merge time."""
    parts = [
        "<!doctype html><meta charset='utf-8'><title>yana near-duplicate report</title>",
        _STYLE,
        f"<h1>Near-duplicate groups</h1><p>{total_groups} groups, {total_dups} duplicates "
        f"(from {html.escape(api_url)}).</p>",
    ]
    for g in groups:
        k, dups = g["kept"], g["duplicates"]
        title = " ".join(html.escape(x) for x in (k.get("brand_name"), k.get("product_name")) if x) or html.escape(
            k["id"]
        )
        parts.append(
            f"<section><h2>{title} <small>({len(dups)} duplicate{'s' if len(dups) != 1 else ''}; "
            f"{html.escape(k['id'])})</small></h2>"
        )
        parts.append(
            _figure(
                k,
                f"kept: {html.escape(k.get('file_name') or '?')}<br>{html.escape(k.get('ingested_at') or '')}"
                f"<br>pHash {html.escape(k.get('phash') or '')}",
                kept=True,
            )
        )
        for d in dups:
            parts.append(
                _figure(
                    d,
                    f"{html.escape(d.get('file_name') or '?')}<br>distance <b>{d.get('distance')}</b>"
                    f"<br>{html.escape(d.get('at') or '')}",
                )
            )
        parts.append("</section>")
    return "\n".join(parts)


def dedup_report(
    output: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write.")] = Path("dedup-report.html"),
    api: ApiOpt = None,
    token: TokenOpt = None,
) -> None:
    """Write an HTML page of near-duplicate groups: thumbnails, brand, file names, times and
    Hamming distances, read from the API (GET /v1/dedup/groups)."""
    groups: list[dict] = []
    with open_link(api, token) as link:
        cursor: int | None = 0
        try:
            while cursor is not None:
                r = link.request("GET", "/v1/dedup/groups", params={"limit": 50, "cursor": cursor, "thumbs": "true"})
                if r.status_code != 200:
                    fail(r)
                page = r.json()
                groups += page["groups"]
                cursor = page["next_cursor"]
        except ApiUnreachable as exc:
            unreachable(exc)
    n_dups = sum(len(g["duplicates"]) for g in groups)
    output.write_text(render_dedup_report(groups, len(groups), n_dups, link.url), encoding="utf-8")
    out.print(f"{len(groups)} groups, {n_dups} duplicates → {output}")
    for g in groups[:10]:
        k = g["kept"]
        label = " ".join(x for x in (k.get("brand_name"), k.get("product_name")) if x) or k["id"]
        names = ", ".join(f"{d.get('file_name')} (distance {d.get('distance')})" for d in g["duplicates"][:5])
        out.print(
            f"  {label} [{k.get('file_name')}, {k.get('ingested_at')}] ← {names}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


# --- re-embedding and collections ----------------------------------------------------------


def reembed(
    model: Annotated[str, typer.Option("--model", help="Embedding model to re-embed every stored text with.")],
    wait: Annotated[bool, typer.Option(help="Follow the job to its end.")] = True,
    api: ApiOpt = None,
    token: TokenOpt = None,
) -> None:
    """Build a collection for MODEL from the stored texts, then swap the active alias to it."""
    with open_link(api, token, reconnect_s=60) as link:
        try:
            r = link.request("POST", "/v1/reembed", json={"model": model})
            if r.status_code != 202:
                fail(r)
            job_id = r.json()["job_id"]
            out.print(f"job {job_id}")
            if not wait:
                return
            with Progress(
                TextColumn("[bold]reembed"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
            ) as progress:
                link.say = progress.console.print
                bar = progress.add_task("reembed", total=None)
                job = wait_job(
                    link,
                    job_id,
                    lambda p: progress.update(bar, completed=p["done"], total=p["total"] or None),
                    poll_s=2,
                )
        except ApiUnreachable as exc:
            unreachable(exc)
    if job["status"] != "succeeded":
        console.print(f"[red]{job['status']}[/red] {escape(str(job.get('error')))}")
        raise typer.Exit(1)
    res = job["result"]
    out.print(
        f"active collection: {res['target']} ({res['count']} chunks, {res['model']}, dim {res['dim']}); "
        f"previous: {res['source']} (drop it with `yana collections drop {res['source']}`)"
    )


collections_app = typer.Typer(
    help="Vector collections (one per embedding model and version).", no_args_is_help=True, rich_markup_mode="markdown"
)


@collections_app.command("list")
def collections_list(api: ApiOpt = None, token: TokenOpt = None) -> None:
    """List collections with model, dimension and size; mark the active one."""
    with open_link(api, token) as link:
        try:
            r = link.request("GET", "/v1/collections")
        except ApiUnreachable as exc:
            unreachable(exc)
        if r.status_code != 200:
            fail(r)
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
    with open_link(api, token) as link:
        try:
            r = link.request("DELETE", f"/v1/collections/{name}")
        except ApiUnreachable as exc:
            unreachable(exc)
        if r.status_code != 200:
            fail(r)
    out.print(f"dropped {name}")


def sample_labels(
    out: Annotated[Path, typer.Argument(help="Folder to write the images and labels.jsonl into.")],
    n: Annotated[int, typer.Option(min=1, max=100_000, help="Distinct labels.")] = 50,
    variants: Annotated[int, typer.Option(min=0, max=6, help="Near-duplicate variants per label.")] = 1,
    seed: Annotated[int, typer.Option(help="Random seed (the same seed writes the same images).")] = 0,
) -> None:
    """Write synthetic sake and juice label images (Japanese text) and a labels.jsonl for --meta.

    Local files only; try them with `yana ingest OUT --meta OUT/labels.jsonl`.
    """
    from tools.datagen.images import write_dataset

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
