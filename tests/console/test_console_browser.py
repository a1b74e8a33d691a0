"""The web console driven in a real browser (Debian's chromium under Playwright) against the
shared private stack: upload a folder of photos with a fields file and watch the job finish, split
a wrong merge and find the split label by search, merge two labels, correct a brand (once
PATCH /v1/labels exists), log in and out with auth on, and basic accessibility on every page.

Set CONSOLE_SCREENSHOTS=<folder> to save a PNG of each page there (docs/console/ holds them)."""

from __future__ import annotations

import csv
import io
import os
import random
import shutil
from pathlib import Path

import httpx
import pytest

from tests.stack import wait_for
from tools.datagen import images
from tools.datagen.catalog import generate_labels

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SPLIT_REGION = "分割試験町"  # only the merged upload says this: the split label is found by it
SHOTS = os.environ.get("CONSOLE_SCREENSHOTS")


@pytest.fixture(scope="module")
def browser():
    # No skip: .ci/run and README's set-up install Debian's chromium; a missing browser is a failure.
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} missing: apt-get install chromium (README, Install)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture()
def page(browser, stack):
    ctx = browser.new_context(base_url=stack.api_url, viewport={"width": 1200, "height": 820}, locale="ja-JP")
    ctx.set_default_timeout(30_000)
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    ctx.close()
    assert not errors, f"script errors on the page: {errors}"


def shot(pg, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(Path(SHOTS) / f"{name}.png"))


def _labels(n: int, seed: int) -> list[dict]:
    out, seen = [], set()
    for lab in generate_labels(6 * n, seed):
        f = lab.fields()
        if f["brand_name"] not in seen and f["category"] == "sake":
            seen.add(f["brand_name"])
            out.append(f)
    return out[:n]


@pytest.fixture(scope="module")
def photo_folder(tmp_path_factory):
    """Three distinct labels and a resized copy of the first (same brand and product, so ingest
    merges it; only its region differs), plus a CSV of fields per file name."""
    folder = tmp_path_factory.mktemp("photos")
    # A fixed catalogue seed, so the merge this test needs does not depend on how the labels read
    # (ingest reads every label; read values the uploader did not give join the decision).
    metas = _labels(3, seed=13)
    originals = [images.render_label(m, seed=900 + i) for i, m in enumerate(metas)]
    rows = []
    for i, (m, im) in enumerate(zip(metas, originals, strict=True)):
        (folder / f"label{i}.jpg").write_bytes(images.encode(im, "JPEG", 90))
        rows.append({"name": f"label{i}.jpg", **{k: m[k] for k in ("brand_name", "product_name", "brewery", "region")}})
    v = images.variant(originals[0], "resize", random.Random(1))
    (folder / "label0_copy.jpg").write_bytes(images.encode(v.image, "JPEG", 85))
    rows.append({**rows[0], "name": "label0_copy.jpg", "region": SPLIT_REGION})
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    fields = folder.parent / f"{folder.name}_fields.csv"
    fields.write_text(buf.getvalue(), encoding="utf-8")
    return {"folder": folder, "fields": fields, "metas": metas}


def _search(api, **body) -> list[dict]:
    r = api.post("/v1/search", json={"page_size": 50, **body})
    r.raise_for_status()
    return r.json()["hits"]


@pytest.fixture(scope="module")
def ingested(browser, stack, api, photo_folder):
    """Upload the folder from the ingest page; the job page shows the outcomes as they come."""
    ctx = browser.new_context(base_url=stack.api_url)
    pg = ctx.new_page()
    pg.goto("/console/#/ingest")
    files = sorted(str(p) for p in photo_folder["folder"].iterdir())
    pg.get_by_label("写真ファイル").set_input_files(files)
    pg.get_by_label("項目ファイル (CSV/JSONL、任意)").set_input_files(str(photo_folder["fields"]))
    pg.get_by_text("4 枚を選択").wait_for()
    shot(pg, "ingest")
    pg.get_by_role("button", name="取り込む").click()
    pg.wait_for_url("**/console/#/jobs/*", timeout=30_000)
    job_id = pg.url.rsplit("/", 1)[1]
    pg.locator('#job-status[data-status="succeeded"]').wait_for(timeout=180_000)
    rows = pg.locator("#items tbody tr")
    wait_for(lambda: rows.count() == 4, 30, what="every item's row")
    outcomes = [rows.nth(i).get_attribute("data-outcome") for i in range(4)]
    assert sorted(outcomes) == ["dedup", "indexed", "indexed", "indexed"], outcomes
    merged_row = pg.locator('#items tr[data-outcome="dedup"]')
    assert "label0_copy.jpg" in merged_row.inner_text()
    shot(pg, "job")
    ctx.close()
    job = api.get(f"/v1/jobs/{job_id}").json()
    by_name = {o["name"]: o for o in job["result"]["items"]}
    return {"job": job, "by_name": by_name}


def test_upload_a_folder_and_watch_the_job(page, ingested):
    by_name = ingested["by_name"]
    assert by_name["label0_copy.jpg"]["dedup_of"] == by_name["label0.jpg"]["id"]
    page.goto("/console/#/jobs")
    row = page.locator(f'#jobs tr[data-job="{ingested["job"]["id"]}"]')
    row.wait_for()
    assert row.get_attribute("data-status") == "succeeded"
    assert "登録 3・重複 1・失敗 0" in row.inner_text()
    shot(page, "jobs")


def test_split_a_wrong_merge_then_find_it_by_search(page, api, ingested, photo_folder):
    copy, kept = ingested["by_name"]["label0_copy.jpg"], ingested["by_name"]["label0.jpg"]
    assert not [h for h in _search(api, filters={"region": SPLIT_REGION}) if h["id"] != kept["id"]]
    page.goto("/console/#/duplicates")
    group = page.locator(f'section.group[data-kept="{kept["id"]}"]')
    group.wait_for()
    card = group.locator(f'[data-sha1="{copy["hash_sha1"]}"]')
    assert "距離" in card.inner_text() and "理由" in card.inner_text()
    shot(page, "duplicates")
    card.get_by_role("button", name="分割").click()
    page.get_by_text("分割しました").wait_for()
    new_id = "label_" + copy["hash_sha1"][:16]
    hits = _search(api, filters={"region": SPLIT_REGION})
    assert [h["id"] for h in hits] == [new_id]
    assert (hits[0]["brand_name"], hits[0]["region"]) == (photo_folder["metas"][0]["brand_name"], SPLIT_REGION)
    # the decision is recorded and shown
    page.locator("#decisions tbody tr").first.wait_for()
    assert "分割" in page.locator("#decisions tbody tr").first.inner_text()
    dec = api.get("/v1/dedup/decisions").json()["decisions"][0]
    assert (dec["action"], dec["label_id"], dec["from"], dec["who"]) == ("split", new_id, kept["id"], "anonymous")
    # and the labels page finds it by its region
    page.goto("/console/#/labels")
    page.get_by_label("地域").fill(SPLIT_REGION)
    page.get_by_role("button", name="検索", exact=True).click()
    page.locator(f'#label-grid [data-label="{new_id}"]').wait_for()
    wait_for(lambda: page.locator("#label-grid .card").count() == 1, 20, what="only the split label in the grid")
    shot(page, "labels")
    # the same bytes sent again answer the split label, not the one it was merged into
    again = api.post(
        "/v1/ingest",
        files={"file": ("again.jpg", (photo_folder["folder"] / "label0_copy.jpg").read_bytes(), "image/jpeg")},
        data={"category": "sake"},
    )
    assert again.status_code == 200 and again.json()["id"] == new_id, again.text


def test_merge_two_labels(page, api, ingested):
    a, b = ingested["by_name"]["label1.jpg"]["id"], ingested["by_name"]["label2.jpg"]["id"]
    page.goto("/console/#/duplicates")
    page.get_by_label("残すラベル ID").fill(a)
    page.get_by_label("重複とするラベル ID").fill(b)
    page.get_by_role("button", name="統合", exact=True).click()
    page.get_by_text(f"{b} を {a} に統合しました").wait_for()
    page.locator(f'section.group[data-kept="{a}"]').wait_for()
    assert b not in {h["id"] for h in _search(api, query_text=None)}
    groups = api.get("/v1/dedup/groups").json()["groups"]
    group = next(g for g in groups if g["kept"]["id"] == a)
    assert [d["reason"] for d in group["duplicates"]] == ["manual"]
    dec = api.get("/v1/dedup/decisions").json()["decisions"][0]
    assert (dec["action"], dec["label_id"], dec["duplicate"]) == ("merge", a, b)
    shot(page, "duplicates_merged")


def test_correct_a_brand_and_find_it_by_the_new_brand(page, api, ingested):
    label = ingested["by_name"]["label0.jpg"]["id"]
    page.goto(f"/console/#/labels/{label}")
    page.get_by_label("銘柄").fill("訂正後の銘柄")
    page.get_by_role("button", name="保存").click()
    page.get_by_text("保存しました").wait_for()
    page.locator('#fields tr[data-field="brand_name"] [data-source="corrected"]').wait_for()
    assert [h["id"] for h in _search(api, query_text="訂正後の銘柄")][:1] == [label]


def test_rerun_the_failed_items_of_a_job(page, api, photo_folder, tmp_path):
    """A folder with one unreadable photo: the job page offers to re-run it; the re-run job has
    that one item (it fails again: its bytes are still not an image), and asking twice gives the
    same job."""
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0" + os.urandom(64))
    good = tmp_path / "fine.jpg"
    good.write_bytes(images.encode(images.render_label(photo_folder["metas"][1], seed=4242), "JPEG", 70))
    page.goto("/console/#/ingest")
    page.get_by_label("写真ファイル").set_input_files([str(bad), str(good)])
    page.get_by_role("button", name="取り込む").click()
    page.wait_for_url("**/console/#/jobs/*")
    first = page.url.rsplit("/", 1)[1]
    page.locator('#job-status[data-status="succeeded"]').wait_for(timeout=180_000)
    page.locator('#items tr[data-outcome="failed"]').wait_for()
    page.get_by_role("button", name="失敗した項目を再実行").click()
    page.wait_for_url(lambda u: "/jobs/" in u and not u.endswith(first))
    second = page.url.rsplit("/", 1)[1]
    page.locator("#job-status[data-status]").wait_for()
    wait_for(lambda: api.get(f"/v1/jobs/{second}").json()["status"] in ("succeeded", "failed"), 180, what="the re-run")
    job = api.get(f"/v1/jobs/{second}").json()
    assert job["parent_id"] == first
    items = api.get(f"/v1/jobs/{second}/items").json()["items"]
    assert [(o["name"], o["error"]["code"]) for o in items] == [("broken.jpg", "CORRUPT_IMAGE")]
    again = api.post(f"/v1/jobs/{first}/retry-failed")
    assert again.status_code == 200 and again.json()["job_id"] == second and again.json()["existing"]


def test_search_by_photo_marks_the_label_it_shows(page, ingested, photo_folder):
    label = ingested["by_name"]["label1.jpg"]["id"]
    page.goto("/console/#/labels")
    page.get_by_label("写真で検索").set_input_files(str(photo_folder["folder"] / "label1.jpg"))
    page.locator(f'#label-grid .card[data-label="{label}"][data-match="same_image"]').wait_for(timeout=60_000)
    page.get_by_text(f"写真のラベル: {label}").wait_for()


def test_label_page_draws_the_image(page, ingested):
    label = ingested["by_name"]["label1.jpg"]["id"]
    page.goto(f"/console/#/labels/{label}")
    img = page.locator("#label-figure img")
    wait_for(lambda: img.evaluate("i => i.naturalWidth") > 0, 30, what="the label image")
    shot(page, "label")


def test_health_page(page):
    page.goto("/console/#/health")
    page.locator("#queues").wait_for()
    assert page.locator("#queues tbody tr").count() >= 5
    page.locator("#workers").wait_for()
    assert "ingest" in page.locator("#workers").inner_text()
    assert page.locator("#model").inner_text().strip()
    shot(page, "health")


CONTRAST_JS = """() => {
  const lum = (c) => { const [r, g, b] = c.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number).map((v) => {
    v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const bg = (el) => { for (; el; el = el.parentElement) { const c = getComputedStyle(el).backgroundColor;
    if (c && !c.startsWith('rgba(0, 0, 0, 0)') && c !== 'transparent') return c; } return 'rgb(255, 255, 255)'; };
  const bad = [];
  for (const el of document.querySelectorAll('body *')) {
    if (!el.offsetParent || ![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    const s = getComputedStyle(el); if (parseFloat(s.opacity) < 1) continue;
    const a = lum(s.color), b = lum(bg(el)); const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) bad.push(`${el.tagName}.${el.className}: ${ratio.toFixed(2)} ${el.textContent.trim().slice(0, 20)}`);
  }
  const unlabelled = [...document.querySelectorAll('input, select, textarea')].filter((i) => i.type !== 'hidden'
    && !(i.labels && i.labels.length) && !i.getAttribute('aria-label')).map((i) => i.id || i.name);
  return { bad, unlabelled };
}"""


@pytest.mark.parametrize("route", ["jobs", "ingest", "labels", "duplicates", "health"])
def test_accessibility_labels_and_contrast(page, ingested, route):
    page.goto(f"/console/#/{route}")
    page.locator("main h1").wait_for()
    page.wait_for_timeout(300)
    out = page.evaluate(CONTRAST_JS)
    assert not out["unlabelled"], f"inputs without a label on {route}: {out['unlabelled']}"
    assert not out["bad"], f"text below 4.5:1 contrast on {route}: {out['bad']}"


def test_keyboard_reaches_every_page(page):
    page.goto("/console/#/jobs")
    page.locator("#jobs").wait_for()
    seen = []
    for _ in range(12):
        page.keyboard.press("Tab")
        seen.append(page.evaluate("document.activeElement.getAttribute('href') || document.activeElement.id"))
        if seen[-1] == "#/health":
            break
    assert {"#/jobs", "#/ingest", "#/labels", "#/duplicates", "#/health"} <= set(seen), seen
    page.keyboard.press("Enter")
    page.locator("#queues").wait_for()
    assert page.url.endswith("#/health")


def test_language_switch(page):
    page.goto("/console/#/jobs")
    page.get_by_role("heading", name="ジョブ").wait_for()
    page.get_by_role("button", name="Language / 言語").click()
    page.get_by_role("heading", name="Jobs").wait_for()
    assert page.evaluate("document.documentElement.lang") == "en"


@pytest.fixture(scope="module")
def auth_api(stack):
    svc = stack.start_api(name="api-console-auth", AUTH_ENABLED="true", AUTH_TOKENS="console-secret-token")
    yield svc.url
    stack.kill(svc)


def test_login_and_logout_with_auth_on(browser, auth_api):
    assert httpx.get(f"{auth_api}/v1/jobs", timeout=10).status_code == 401
    ctx = browser.new_context(base_url=auth_api, locale="ja-JP")
    pg = ctx.new_page()
    pg.goto("/console/")
    pg.get_by_label("アクセストークン").wait_for()
    assert pg.locator("#nav").is_hidden()
    shot(pg, "login")
    pg.get_by_label("アクセストークン").fill("wrong-token")
    pg.get_by_role("button", name="ログイン", exact=True).click()
    pg.get_by_text("トークンが正しくありません").wait_for()
    pg.get_by_label("アクセストークン").fill("console-secret-token")
    pg.get_by_role("button", name="ログイン", exact=True).click()
    pg.locator("#jobs").wait_for()
    assert pg.evaluate("sessionStorage.getItem('yana.token')") == "console-secret-token"
    pg.locator("#nav").get_by_role("link", name="状態").click()
    pg.locator("#queues").wait_for()  # the data calls carry the token
    pg.get_by_role("button", name="ログアウト").click()
    pg.get_by_label("アクセストークン").wait_for()
    assert pg.evaluate("sessionStorage.getItem('yana.token')") is None
    pg.goto("/console/#/jobs")
    pg.get_by_label("アクセストークン").wait_for()
    ctx.close()


def test_the_console_waits_out_429_as_retry_after_says(browser, stack, ingested):
    """The console's requests honour Retry-After like every client of ours, images included:
    against an API whose limit a few back-to-back requests exceed, every one of them still answers."""
    image = f"/v1/labels/{ingested['by_name']['label1.jpg']['id']}/image"
    tight = stack.start_api(name="api-console-tight", RATE_LIMIT="2/second", RATE_BURST="2")
    ctx = browser.new_context(base_url=tight.url)
    try:
        pg = ctx.new_page()
        pg.goto("/console/#/health")
        statuses = pg.evaluate(
            """async (image) => {
                const { api, imageURL } = await import("/console/static/api.js");
                const out = [];
                const raw = [];
                const pics = [];
                for (let i = 0; i < 6; i++) raw.push((await fetch("/v1/jobs?limit=1")).status);
                for (let i = 0; i < 6; i++) {
                    const r = await api("/v1/jobs?limit=1");
                    out.push(Array.isArray(r.jobs));
                }
                for (let i = 0; i < 6; i++) {
                    // back to back, each its own URL (the browser's HTTP cache would answer a repeat)
                    pics.push(imageURL(`${image}?try=${i}`).then((u) => u.startsWith("blob:"), (e) => String(e)));
                }
                pics.splice(0, 6, ...(await Promise.all(pics)));
                return { out, raw, pics };
            }""",
            image,
        )
        assert 429 in statuses["raw"], "the limit was not hit: the test would pass without the wait"
        assert statuses["out"] == [True] * 6
        assert statuses["pics"] == [True] * 6
    finally:
        ctx.close()
