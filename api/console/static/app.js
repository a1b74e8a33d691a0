// The console: hash routes (#/jobs, #/jobs/<id>, #/ingest, #/labels, #/labels/<id>, #/duplicates,
// #/health, #/login), each a page that only calls the public HTTP API.
import { api, ApiError, clearImages, getToken, imageURL, setToken } from "./api.js";
import { getLang, setLang, t, translateStatic } from "./i18n.js";
import { parseFieldsFile } from "./fields.js";

const view = document.getElementById("view");
const statusLine = document.getElementById("status");
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const BATCH_BYTES = 40 * 1024 * 1024; // under the ingest route's 50 MB body limit
const BATCH_FILES = 500;
const FIELDS = ["category", "brand_name", "product_name", "brewery", "region", "label_features"];
let authRequired = false;
let timer = null; // the current page's polling timer
let page = 0; // bumped on every navigation: a stale page's callbacks stop

// --- helpers ---------------------------------------------------------------------------------
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

function say(msg, isError = false) {
  statusLine.textContent = msg || "";
  statusLine.classList.toggle("error", !!isError);
}

function fail(e) {
  if (e instanceof ApiError && e.status === 401) return;
  say(`${t("error")}: ${e.message}`, true);
}

function age(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  const [n, u] = s < 60 ? [Math.round(s), "u.s"] : s < 3600 ? [Math.round(s / 60), "u.m"] : s < 86400 ? [Math.round(s / 3600), "u.h"] : [Math.round(s / 86400), "u.d"];
  return t("ago", { n, u: t(u) });
}

function when(ts) {
  return ts ? new Date(typeof ts === "number" ? ts * 1000 : ts).toLocaleString(getLang() === "en" ? "en-GB" : "ja-JP") : "";
}

function img(path, alt, cls = "thumb", loading = "lazy") {
  const el = h("img", { class: cls, alt: alt || "", loading });
  if (path) imageURL(path).then((u) => { el.src = u; }).catch(() => { el.alt = `${alt || ""} (${t("none")})`; });
  return el;
}

const labelLink = (id) => (id ? h("a", { href: `#/labels/${encodeURIComponent(id)}` }, id) : "");
const stateBadge = (s) => h("span", { class: `badge ${s === "succeeded" ? "ok" : s === "failed" ? "bad" : s === "cancelled" ? "warn" : ""}` }, t(`state.${s}`));

function progressBar(job) {
  const p = job.progress;
  const done = p ? p.done : TERMINAL.has(job.status) ? 1 : 0;
  const total = p ? Math.max(p.total, 0) : 1;
  return h("span", {}, h("progress", { max: total || 1, value: done, "aria-label": `${t("jobs.progress")} ${done}/${total}` }), ` ${done}/${total}`);
}

function counts(job) {
  const r = job.result;
  if (r && typeof r === "object" && "indexed" in r) return t("counts", { indexed: r.indexed, dedup: r.dedup, failed: r.failed });
  return "";
}

function poll(fn, ms = 1500) {
  const mine = page;
  const tick = async () => {
    if (mine !== page) return;
    let again = true;
    try { again = (await fn()) !== false; } catch (e) { fail(e); }
    if (again && mine === page) timer = setTimeout(tick, ms);
  };
  tick();
}

// --- pages -----------------------------------------------------------------------------------
async function jobsPage() {
  const kind = h("select", { id: "job-kind" }, ["", "ingest", "reembed", "think"].map((k) => h("option", { value: k }, k || t("jobs.all"))));
  const body = h("tbody");
  view.append(
    h("h1", {}, t("jobs.title")),
    h("div", { class: "row" }, h("label", { for: "job-kind" }, t("jobs.filterKind"), kind)),
    h("table", { id: "jobs" }, h("thead", {}, h("tr", {}, ["ID", t("jobs.kind"), t("jobs.state"), t("jobs.progress"), t("jobs.counts"), t("jobs.age")].map((c) => h("th", { scope: "col" }, c)))), body),
  );
  kind.addEventListener("change", () => { clearTimeout(timer); poll(load, 2000); });
  const load = async () => {
    const q = kind.value ? `&kind=${encodeURIComponent(kind.value)}` : "";
    const data = await api(`/v1/jobs?limit=50${q}`);
    body.replaceChildren(...(data.jobs.length ? data.jobs.map((j) => h("tr", { "data-job": j.id, "data-status": j.status },
      h("td", {}, h("a", { href: `#/jobs/${j.id}` }, j.id)), h("td", {}, j.kind), h("td", {}, stateBadge(j.status)),
      h("td", {}, progressBar(j)), h("td", {}, counts(j)), h("td", {}, age(j.created_at)))) : [h("tr", {}, h("td", { colspan: 6 }, t("jobs.empty")))]));
  };
  poll(load, 2000);
}

function outcomeCell(o) {
  if (o.error) return h("span", { class: "bad" }, t("out.failed"));
  if (String(o.index).startsWith("doc:")) return t("out.document");
  return o.dedup ? h("span", { class: "warn" }, t("out.dedup")) : h("span", { class: "ok" }, t("out.indexed"));
}

function whyCell(o) {
  if (!o.dedup) return "";
  const parts = [`${t("dups.distance")} ${o.distance ?? "?"}`];
  if (o.verifier_score !== null && o.verifier_score !== undefined) parts.push(`${t("dups.score")} ${Number(o.verifier_score).toFixed(2)}`);
  else if (o.distance === 0) parts.push(t("reason.exact"));
  return parts.join(" · ");
}

async function jobPage(id) {
  const head = h("div", { class: "row" });
  const body = h("tbody");
  const cancel = h("button", { type: "button", class: "danger", id: "cancel" }, t("job.cancel"));
  view.append(h("h1", {}, `${t("job.title")} ${id}`), head,
    h("h2", {}, t("job.items")),
    h("table", { id: "items" }, h("thead", {}, h("tr", {}, [t("job.thumb"), t("job.name"), t("job.outcome"), t("job.mergedInto"), t("job.why"), t("job.error")].map((c) => h("th", { scope: "col" }, c)))), body));
  cancel.addEventListener("click", async () => {
    try { await api(`/v1/jobs/${id}`, { method: "DELETE" }); say(t("job.cancelled")); } catch (e) { fail(e); }
  });
  const retry = h("button", { type: "button", class: "secondary", id: "retry" }, t("job.retry"));
  retry.addEventListener("click", async () => {
    retry.disabled = true;
    try {
      const res = await api(`/v1/jobs/${id}/retry-failed`, { method: "POST" });
      if (res.lost && res.lost.length) say(`${t("job.lost")}: ${res.lost.map((x) => x.name || x.index).join(", ")}`, true);
      if (res.job_id) { say(t("job.retried")); location.hash = `#/jobs/${res.job_id}`; }
    } catch (e) { retry.disabled = false; fail(e); }
  });
  const shown = new Map();
  poll(async () => {
    const [job, items] = await Promise.all([api(`/v1/jobs/${id}`), api(`/v1/jobs/${id}/items`)]);
    const failed = items.items.filter((o) => o.error).length;
    head.replaceChildren(h("span", { id: "job-status", "data-status": job.status }, stateBadge(job.status)), job.kind, progressBar(job), counts(job),
      job.error ? h("span", { class: "bad" }, job.error.message) : "", TERMINAL.has(job.status) ? "" : cancel,
      job.parent_id ? h("a", { href: `#/jobs/${job.parent_id}` }, `${t("job.parent")} ${job.parent_id}`) : "",
      job.kind === "ingest" && TERMINAL.has(job.status) && (failed || job.status === "failed") ? retry : "");
    for (const o of items.items) {
      const key = String(o.index);
      if (shown.has(key)) continue;
      const row = h("tr", { "data-outcome": o.error ? "failed" : o.dedup ? "dedup" : "indexed" },
        h("td", {}, o.image_url ? img(o.image_url, o.name || o.id, "thumb small") : ""), h("td", {}, o.name || o.id || key),
        h("td", {}, outcomeCell(o)), h("td", {}, o.dedup ? labelLink(o.dedup_of) : labelLink(o.id)), h("td", {}, whyCell(o)),
        h("td", { class: "bad" }, o.error ? o.error.message : ""));
      shown.set(key, row);
      body.append(row);
    }
    if (!items.items.length) body.replaceChildren(h("tr", {}, h("td", { colspan: 6 }, t("job.noItems"))));
    else if (body.firstChild && !body.firstChild.dataset.outcome) body.firstChild.remove();
    return !TERMINAL.has(job.status);
  }, 1000);
}

async function ingestPage() {
  let files = [];
  let overrides = null;
  const count = h("p", { id: "selected", "aria-live": "polite" });
  const cat = h("select", { id: "ingest-category", name: "category" }, ["sake", "juice"].map((c) => h("option", { value: c }, t(`cat.${c}`))));
  const picker = h("input", { type: "file", id: "ingest-files", multiple: true, accept: "image/*" });
  const folder = h("input", { type: "file", id: "ingest-folder", multiple: true, webkitdirectory: true });
  const fieldsFile = h("input", { type: "file", id: "ingest-fields", accept: ".csv,.jsonl,.ndjson,text/csv,application/json" });
  const setFiles = (list) => {
    files = [...list].filter((f) => f.type.startsWith("image/") || /\.(jpe?g|png|webp|gif|bmp|tiff?)$/i.test(f.name));
    count.textContent = t("ingest.selected", { n: files.length });
  };
  picker.addEventListener("change", () => setFiles(picker.files));
  folder.addEventListener("change", () => setFiles(folder.files));
  fieldsFile.addEventListener("change", async () => {
    try {
      overrides = fieldsFile.files[0] ? parseFieldsFile(fieldsFile.files[0].name, await fieldsFile.files[0].text()) : null;
      if (overrides) say(t("ingest.fieldsRows", { n: new Set(overrides.values()).size }));
    } catch (e) { fail(e); }
  });
  const drop = h("div", { class: "drop", id: "drop" }, t("ingest.drop"));
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", async (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    setFiles(await droppedFiles(e.dataTransfer));
  });
  const form = h("form", { class: "row", id: "ingest-form" },
    h("label", { for: "ingest-category" }, t("ingest.category"), cat),
    h("label", { for: "ingest-files" }, t("ingest.files"), picker),
    h("label", { for: "ingest-folder" }, t("ingest.folder"), folder),
    h("label", { for: "ingest-fields" }, t("ingest.fields"), fieldsFile),
    h("button", { type: "submit" }, t("ingest.submit")));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!files.length) return say(t("ingest.none"), true);
    // One request per batch (the route takes 50 MB at most): each batch is one job.
    const batches = [[]];
    let bytes = 0;
    for (const f of files) {
      if (batches.at(-1).length && (bytes + f.size > BATCH_BYTES || batches.at(-1).length >= BATCH_FILES)) { batches.push([]); bytes = 0; }
      batches.at(-1).push(f);
      bytes += f.size;
    }
    const jobs = [];
    try {
      for (const batch of batches) {
        const fd = new FormData();
        fd.append("category", cat.value);
        const items = batch.map((f) => (overrides && (overrides.get(f.name) || overrides.get(f.webkitRelativePath))) || {});
        batch.forEach((f) => fd.append("files", f, f.name));
        if (items.some((o) => Object.keys(o).length)) fd.append("items", JSON.stringify(items));
        const res = await api("/v1/ingest", { method: "POST", form: fd });
        if (res.dedup) say(t("ingest.exact", { id: res.id }));
        else { jobs.push(res.job_id); say(t("ingest.started", { id: res.job_id })); }
      }
    } catch (err) { fail(err); }
    if (jobs.length === 1) location.hash = `#/jobs/${jobs[0]}`;
    else if (jobs.length > 1) location.hash = "#/jobs";
  });
  view.append(h("h1", {}, t("ingest.title")), drop, form, count);
}

async function droppedFiles(dt) {
  // A dropped folder: walk its entries (webkitGetAsEntry), else take the files as they are.
  const entries = [...dt.items].map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
  if (!entries.length) return [...dt.files];
  const out = [];
  const walk = async (entry) => {
    if (entry.isFile) out.push(await new Promise((ok, ko) => entry.file(ok, ko)));
    else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await new Promise((ok, ko) => reader.readEntries(ok, ko));
        if (!batch.length) break;
        for (const e of batch) await walk(e);
      }
    }
  };
  for (const e of entries) await walk(e);
  return out;
}

async function labelsPage() {
  const q = h("input", { type: "search", id: "q", name: "query_text" });
  const cat = h("select", { id: "category" }, ["", "sake", "juice"].map((c) => h("option", { value: c }, t(c ? `cat.${c}` : "cat.any"))));
  const region = h("input", { type: "text", id: "region", size: 10 });
  const brewery = h("input", { type: "text", id: "brewery", size: 12 });
  const sort = h("select", { id: "sort" }, ["relevance", "recency"].map((c) => h("option", { value: c }, t(`sort.${c}`))));
  const photo = h("input", { type: "file", id: "photo", accept: "image/*" });
  const grid = h("div", { class: "grid", id: "label-grid" });
  const more = h("button", { type: "button", class: "secondary", hidden: true }, t("labels.more"));
  let nextPage = null;
  let lastBody = null;
  const filters = () => {
    const f = {};
    if (cat.value) f.category = cat.value;
    if (region.value.trim()) f.region = region.value.trim();
    if (brewery.value.trim()) f.brewery = brewery.value.trim();
    return f;
  };
  const render = (hits, append) => {
    const cards = hits.map((hit) => h("div", { class: "card", "data-label": hit.id },
      h("a", { href: `#/labels/${encodeURIComponent(hit.id)}` }, hit.image_url ? img(hit.image_url, hit.brand_name || hit.id) : h("div", { class: "thumb" }),
        h("strong", {}, hit.brand_name || hit.id)),
      h("span", { class: "muted" }, [hit.product_name, hit.brewery, hit.region].filter(Boolean).join(" · "))));
    if (append) grid.append(...cards);
    else grid.replaceChildren(...(cards.length ? cards : [h("p", {}, t("labels.empty"))]));
  };
  let asked = 0; // only the latest search's answer is shown (an earlier one may arrive later)
  const run = async (page = 1) => {
    const body = { query_text: q.value.trim() || null, filters: filters(), sort_by: sort.value, page, page_size: 24 };
    lastBody = body;
    const mine = ++asked;
    const data = await api("/v1/search", { method: "POST", json: body });
    if (mine !== asked) return;
    nextPage = data.next_page;
    more.hidden = !nextPage;
    render(data.hits.filter((x) => x.source !== "text"), page > 1);
  };
  const form = h("form", { class: "row", id: "search-form", role: "search" },
    h("label", { for: "q" }, t("labels.query"), q), h("label", { for: "category" }, t("f.category"), cat),
    h("label", { for: "region" }, t("labels.region"), region), h("label", { for: "brewery" }, t("labels.brewery"), brewery),
    h("label", { for: "sort" }, t("labels.sort"), sort), h("button", { type: "submit" }, t("labels.search")),
    h("label", { for: "photo" }, t("labels.photo"), photo));
  form.addEventListener("submit", (e) => { e.preventDefault(); run().catch(fail); });
  more.addEventListener("click", () => { if (nextPage && lastBody) run(nextPage).catch(fail); });
  photo.addEventListener("change", async () => {
    if (!photo.files[0]) return;
    const fd = new FormData();
    fd.append("file", photo.files[0]);
    for (const [k, v] of Object.entries(filters())) fd.append(k, v);
    fd.append("k", "20");
    const mine = ++asked;
    try {
      const data = await api("/v1/search/photo", { method: "POST", form: fd });
      if (mine !== asked) return;
      more.hidden = true;
      render(data.hits, false);
      const first = data.match && grid.querySelector(`[data-label="${CSS.escape(data.match.id)}"]`);
      if (first) first.setAttribute("data-match", data.match.kind);
      say(data.match ? t("labels.photoMatch", { id: data.match.id }) : t("labels.photoNotFound"), !data.match);
    } catch (e) {
      fail(e);
    }
  });
  view.append(h("h1", {}, t("labels.title")), form, grid, more);
  run().catch(fail);
}

function sourceBadge(src) {
  return src ? h("span", { class: "badge", "data-source": src }, t(`src.${src}`)) : "";
}

function boxesOver(figure, image, lines) {
  // The read text's boxes (image pixel coordinates) drawn over the image, scaled with it.
  const draw = () => {
    const w = image.naturalWidth, hgt = image.naturalHeight;
    if (!w || !hgt) return;
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("aria-hidden", "true");
    for (const line of lines) {
      if (!Array.isArray(line.box)) continue;
      const poly = document.createElementNS(ns, "polygon");
      poly.setAttribute("points", line.box.map((p) => p.join(",")).join(" "));
      const title = document.createElementNS(ns, "title");
      title.textContent = line.text;
      poly.append(title);
      svg.append(poly);
    }
    figure.append(svg);
  };
  if (image.complete && image.naturalWidth) draw(); else image.addEventListener("load", draw, { once: true });
}

async function labelPage(id) {
  view.append(h("h1", {}, `${t("label.title")} ${id}`));
  let rec = null;
  try {
    rec = await api(`/v1/labels/${encodeURIComponent(id)}`);
  } catch (e) {
    if (!(e instanceof ApiError) || ![404, 405].includes(e.status)) throw e;
  }
  const image = img(rec?.image_url || `/v1/labels/${encodeURIComponent(id)}/image`, id, "", "eager");
  const figure = h("div", { class: "figure", id: "label-figure" }, image);
  const lines = rec?.read?.lines || [];
  if (lines.length) boxesOver(figure, image, lines);
  const left = h("div", {}, figure);
  const right = h("div", {});
  view.append(h("div", { class: "label-page" }, left, right));
  if (!rec) {
    right.append(h("p", { class: "muted" }, t("label.noRecord")));
    return;
  }
  const fields = rec.fields || {};
  const names = [...new Set([...FIELDS, ...Object.keys(fields)])];
  right.append(h("h2", {}, t("label.fields")), h("table", { class: "kv", id: "fields" },
    h("thead", {}, h("tr", {}, [t("label.field"), t("label.value"), t("label.source"), t("label.confidence")].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, names.filter((n) => fields[n] !== undefined).map((n) => {
      const f = fields[n] && typeof fields[n] === "object" && !Array.isArray(fields[n]) ? fields[n] : { value: fields[n] };
      const v = Array.isArray(f.value) ? f.value.join("、") : f.value ?? "";
      return h("tr", { "data-field": n }, h("td", {}, t(`f.${n}`)), h("td", {}, v), h("td", {}, sourceBadge(f.source)),
        h("td", {}, f.confidence !== undefined && f.confidence !== null ? Number(f.confidence).toFixed(2) : ""));
    }))));
  const inputs = {};
  const form = h("form", { id: "correct-form" }, h("h2", {}, t("label.correct")),
    ...["brand_name", "product_name", "brewery", "region"].map((n) => {
      const cur = fields[n] && typeof fields[n] === "object" ? fields[n].value : fields[n];
      inputs[n] = h("input", { type: "text", id: `fix-${n}`, name: n, value: cur ?? "" });
      return h("div", { class: "row" }, h("label", { for: `fix-${n}` }, t(`f.${n}`), inputs[n]));
    }), h("button", { type: "submit" }, t("label.save")));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const changed = {};
    for (const [n, el] of Object.entries(inputs)) {
      const cur = fields[n] && typeof fields[n] === "object" ? fields[n].value : fields[n];
      if (el.value.trim() !== (cur ?? "")) changed[n] = el.value.trim();
    }
    if (!Object.keys(changed).length) return;
    try {
      await api(`/v1/labels/${encodeURIComponent(id)}`, { method: "PATCH", json: { fields: changed } });
      say(t("label.saved"));
      route();
    } catch (err) { fail(err); }
  });
  right.append(form);
  left.append(h("h2", {}, t("label.read")), rec.read && rec.read.text ? h("pre", { id: "read-text" }, rec.read.text) : h("p", { class: "muted" }, t(rec.read_pending ? "label.readPending" : rec.read_failed ? "label.readFailed" : "label.noRead")));
  if (rec.duplicates && rec.duplicates.length) {
    right.append(h("h2", {}, t("label.duplicates")), h("ul", {}, rec.duplicates.map((d) => h("li", {}, typeof d === "string" ? d : `${d.hash_sha1 || d.id || ""} ${d.distance !== undefined ? `(${t("dups.distance")} ${d.distance})` : ""}`))));
  }
}

function dupCard(d, onSplit) {
  const btn = h("button", { type: "button", class: "secondary", "data-split": d.hash_sha1 }, t("dups.split"));
  btn.addEventListener("click", () => onSplit(d, btn));
  return h("div", { class: "card", "data-sha1": d.hash_sha1 },
    d.thumbnail ? h("img", { class: "thumb", src: d.thumbnail, alt: d.file_name || d.hash_sha1 }) : h("div", { class: "thumb" }),
    h("span", {}, d.file_name || d.hash_sha1.slice(0, 12)),
    h("span", {}, `${t("dups.distance")}: ${d.distance ?? "?"}`),
    h("span", {}, `${t("dups.reason")}: ${t(`reason.${d.reason || "near-duplicate"}`)}`),
    d.verifier_score !== null && d.verifier_score !== undefined ? h("span", { class: "muted" }, `${t("dups.score")}: ${Number(d.verifier_score).toFixed(2)}`) : "",
    h("span", { class: "muted" }, when(d.at)), btn);
}

async function duplicatesPage() {
  const list = h("div", { id: "groups" });
  const keep = h("input", { type: "text", id: "merge-keep", size: 24, required: true, pattern: "label_[0-9a-f]{16}" });
  const dup = h("input", { type: "text", id: "merge-dup", size: 24, required: true, pattern: "label_[0-9a-f]{16}" });
  const merge = h("form", { class: "row", id: "merge-form" }, h("label", { for: "merge-keep" }, t("dups.keep"), keep),
    h("label", { for: "merge-dup" }, t("dups.duplicate"), dup), h("button", { type: "submit" }, t("dups.mergeBtn")));
  const decisions = h("tbody");
  merge.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api("/v1/dedup/merge", { method: "POST", json: { keep: keep.value.trim(), duplicate: dup.value.trim() } });
      say(t("dups.mergeDone", { dup: dup.value.trim(), keep: keep.value.trim() }));
      await load();
    } catch (err) { fail(err); }
  });
  const onSplit = async (d, btn) => {
    btn.disabled = true;
    try {
      const res = await api("/v1/dedup/split", { method: "POST", json: { hash_sha1: d.hash_sha1 } });
      say(t("dups.splitDone", { id: res.label_id }));
      await load();
    } catch (err) { btn.disabled = false; fail(err); }
  };
  const load = async () => {
    const [data, dec] = await Promise.all([api("/v1/dedup/groups?thumbs=true&limit=50"), api("/v1/dedup/decisions?limit=50")]);
    list.replaceChildren(...(data.groups.length ? data.groups.map((g) => h("section", { class: "group", "data-kept": g.kept.id, "aria-label": g.kept.id },
      h("div", { class: "side" },
        h("div", { class: "card" }, g.kept.thumbnail ? h("img", { class: "thumb", src: g.kept.thumbnail, alt: g.kept.brand_name || g.kept.id }) : h("div", { class: "thumb" }),
          h("strong", {}, t("dups.kept")), labelLink(g.kept.id), h("span", {}, [g.kept.brand_name, g.kept.product_name].filter(Boolean).join(" · "))),
        g.duplicates.map((d) => dupCard(d, onSplit))))) : [h("p", {}, t("dups.empty"))]));
    decisions.replaceChildren(...dec.decisions.map((x) => h("tr", {}, h("td", {}, t(`act.${x.action}`)), h("td", {}, labelLink(x.label_id)),
      h("td", {}, x.action === "merge" ? labelLink(x.duplicate) : labelLink(x.from)), h("td", {}, x.who), h("td", {}, when(x.at)))));
  };
  view.append(h("h1", {}, t("dups.title")), h("h2", {}, t("dups.merge")), merge, list,
    h("h2", {}, t("dups.decisions")), h("table", { id: "decisions" }, h("thead", {}, h("tr", {}, [t("dups.action"), t("dups.label"), t("dups.other"), t("dups.who"), t("dups.when")].map((c) => h("th", { scope: "col" }, c)))), decisions));
  await load();
}

function okMark(v) {
  return v === null || v === undefined ? h("span", { class: "muted" }, "—") : v ? h("span", { class: "ok" }, "OK") : h("span", { class: "bad" }, "NG");
}

async function healthPage() {
  const box = h("div", { id: "health" });
  view.append(h("h1", {}, t("health.title")), box);
  poll(async () => {
    const [hz, cols, ops, reembeds] = await Promise.all([
      api("/v1/healthz"), api("/v1/collections"), api("/v1/queues").catch(() => null),
      api("/v1/jobs?kind=reembed&limit=5"),
    ]);
    const active = (cols.collections || []).find((c) => c.name === cols.active) || {};
    const running = reembeds.jobs.filter((j) => !TERMINAL.has(j.status));
    box.replaceChildren(
      h("h2", {}, t("health.stores")),
      h("dl", { class: "health" }, h("dt", {}, t("health.overall")), h("dd", { id: "overall" }, hz.status),
        h("dt", {}, "Redis"), h("dd", {}, okMark(hz.redis_ok)), h("dt", {}, "Chroma"), h("dd", {}, okMark(hz.chroma_ok)),
        h("dt", {}, "RAG"), h("dd", {}, okMark(hz.rag_ok)), h("dt", {}, "LLM"), h("dd", {}, okMark(hz.llm_ok)),
        h("dt", {}, t("health.version")), h("dd", {}, hz.server_version || "")),
      h("h2", {}, t("health.model")),
      h("dl", { class: "health" }, h("dt", {}, t("health.model")), h("dd", { id: "model" }, active.model || ""),
        h("dt", {}, t("health.active")), h("dd", {}, `${cols.active || ""} (${t("health.size")} ${active.count ?? "?"})`),
        h("dt", {}, t("health.building")), h("dd", {}, cols.building || t("none"))),
      h("h2", {}, t("health.reembed")),
      running.length ? h("ul", {}, running.map((j) => h("li", {}, h("a", { href: `#/jobs/${j.id}` }, j.id), " ", stateBadge(j.status), " ", progressBar(j), ` → ${cols.building || ""}`))) : h("p", { class: "muted" }, t("health.noReembed")),
      h("h2", {}, t("health.queues")),
      ops ? h("table", { id: "queues" }, h("thead", {}, h("tr", {}, h("th", { scope: "col" }, t("health.queues")), h("th", { scope: "col" }, t("health.depth")))),
        h("tbody", {}, Object.entries(ops.queues).map(([q, n]) => h("tr", {}, h("td", {}, q), h("td", {}, n))))) : "",
      h("h2", {}, t("health.workers")),
      ops && ops.workers.length ? h("table", { id: "workers" }, h("thead", {}, h("tr", {}, h("th", { scope: "col" }, t("health.workers")), h("th", { scope: "col" }, t("health.queues")))),
        h("tbody", {}, ops.workers.map((w) => h("tr", {}, h("td", {}, w.name), h("td", {}, w.queues.join(", ")))))) : h("p", { class: "muted" }, t("health.noWorkers")),
    );
  }, 5000);
}

function loginPage() {
  const tok = h("input", { type: "password", id: "token", name: "token", autocomplete: "current-password", required: true });
  const form = h("form", { class: "login", id: "login-form" }, h("h1", {}, t("login.title")),
    h("label", { for: "token" }, t("login.token"), tok), h("button", { type: "submit" }, t("login.submit")));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api("/v1/jobs?limit=1", { token: tok.value });
      setToken(tok.value);
      say("");
      location.hash = "#/jobs";
      chrome();
    } catch (err) {
      say(err instanceof ApiError && err.status === 401 ? t("login.bad") : err.message, true);
    }
  });
  view.append(form);
  tok.focus();
}

// --- shell -----------------------------------------------------------------------------------
const ROUTES = [
  [/^#\/jobs\/([\w.:-]+)$/, jobPage], [/^#\/jobs$/, jobsPage], [/^#\/ingest$/, ingestPage],
  [/^#\/labels\/([\w.:-]+)$/, labelPage], [/^#\/labels$/, labelsPage], [/^#\/duplicates$/, duplicatesPage],
  [/^#\/health$/, healthPage], [/^#\/login$/, loginPage],
];

function chrome() {
  const loggedIn = !authRequired || !!getToken();
  document.getElementById("nav").hidden = !loggedIn;
  document.getElementById("logout").hidden = !(authRequired && getToken());
  document.getElementById("lang").textContent = t("lang");
  translateStatic();
}

async function route() {
  page += 1;
  clearTimeout(timer);
  let hash = location.hash || "#/jobs";
  if (authRequired && !getToken()) hash = "#/login";
  const match = ROUTES.map(([re, fn]) => [hash.match(re), fn]).find(([m]) => m) || [[], jobsPage];
  view.replaceChildren();
  document.querySelectorAll("nav a").forEach((a) => a.toggleAttribute("aria-current", hash.startsWith(a.getAttribute("href"))) || a.removeAttribute("aria-current"));
  document.querySelectorAll("nav a").forEach((a) => { if (hash.startsWith(a.getAttribute("href"))) a.setAttribute("aria-current", "page"); });
  chrome();
  try {
    await match[1](...match[0].slice(1).map(decodeURIComponent));
  } catch (e) { fail(e); }
}

window.addEventListener("yana:unauthorized", () => {
  authRequired = true;
  setToken(null);
  say(t("login.needed"), true);
  if (location.hash !== "#/login") location.hash = "#/login"; else route();
});
document.getElementById("logout").addEventListener("click", () => {
  setToken(null);
  clearImages();
  say(t("loggedout"));
  location.hash = "#/login";
  chrome();
});
document.getElementById("lang").addEventListener("click", () => { setLang(getLang() === "ja" ? "en" : "ja"); route(); });
window.addEventListener("hashchange", route);

(async function start() {
  setLang(getLang());
  try {
    await api("/v1/jobs?limit=1", { token: getToken() || null });
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) authRequired = true;
  }
  if (authRequired && getToken()) {
    try { await api("/v1/jobs?limit=1"); } catch { /* the listener sends to the login page */ }
  }
  route();
})();
