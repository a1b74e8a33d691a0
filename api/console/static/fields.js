// An optional fields file for an ingest: CSV (a header row) or JSON lines, one row per photo,
// matched by its `name` / `file` / `file_name` column to the photo's file name.
const NAME_KEYS = ["name", "file", "file_name", "filename"];

function csvRows(text) {
  const rows = [];
  let row = [], cell = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { cell += '"'; i++; }
      else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") { row.push(cell); cell = ""; }
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(cell); rows.push(row); row = []; cell = "";
    } else cell += c;
  }
  if (cell || row.length) { row.push(cell); rows.push(row); }
  return rows.filter((r) => r.some((x) => x.trim()));
}

export function parseFieldsFile(fileName, text) {
  text = text.replace(/^\uFEFF/, "");
  let objects;
  if (/\.(jsonl|ndjson|json)$/i.test(fileName)) {
    objects = text.split(/\r?\n/).filter((l) => l.trim()).map((l) => JSON.parse(l));
  } else {
    const [head, ...rows] = csvRows(text);
    objects = rows.map((r) => Object.fromEntries(head.map((k, i) => [k.trim(), (r[i] ?? "").trim()])));
  }
  const out = new Map();
  for (const o of objects) {
    const key = NAME_KEYS.map((k) => o[k]).find(Boolean);
    if (!key) continue;
    const fields = {};
    for (const [k, v] of Object.entries(o)) if (!NAME_KEYS.includes(k) && v !== "" && v !== null) fields[k] = v;
    out.set(String(key).split("/").pop(), fields);
    out.set(String(key), fields);
  }
  return out;
}
