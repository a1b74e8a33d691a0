// The public HTTP API, with the bearer token kept for this browser tab (sessionStorage).
const KEY = "yana.token";

export const getToken = () => sessionStorage.getItem(KEY);
export const setToken = (t) => (t ? sessionStorage.setItem(KEY, t) : sessionStorage.removeItem(KEY));

export class ApiError extends Error {
  constructor(status, body) {
    const msg = body && body.error ? `${body.error.code}: ${body.error.message}` : `HTTP ${status}`;
    super(msg);
    this.status = status;
    this.body = body;
  }
}

// A 429 is waited out as its Retry-After says (every client of ours does), up to RATE_WAIT_MAX_S
// in all; then it is shown like any other error. A little jitter keeps a page's many requests
// (a grid of thumbnails) from all coming back in the same instant.
const RATE_WAIT_MAX_S = 30;

// Sends one request, waiting out 429s; answers the last response (ok or not).
async function send(path, init) {
  let waited = 0;
  for (;;) {
    const res = await fetch(path, init);
    if (res.status !== 429) return res;
    const after = Math.min(Math.max(Number(res.headers.get("retry-after")) || 1, 0.1), 10) * (1 + 0.5 * Math.random());
    if (waited + after > RATE_WAIT_MAX_S) return res;
    waited += after;
    await new Promise((resolve) => setTimeout(resolve, after * 1000));
  }
}

const bearer = (tok) => (tok ? { Authorization: `Bearer ${tok}` } : {});

export async function api(path, { method = "GET", json, form, token } = {}) {
  const headers = bearer(token === undefined ? getToken() : token);
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form) {
    body = form;
  }
  const res = await send(path, { method, headers, body });
  const ctype = res.headers.get("content-type") || "";
  const data = ctype.includes("json") ? await res.json() : await res.text();
  if (res.ok) return data;
  if (res.status === 401 && token === undefined) window.dispatchEvent(new CustomEvent("yana:unauthorized"));
  throw new ApiError(res.status, data);
}

// <img> cannot send a bearer token: fetch the image with it and show it as a blob: URL.
const images = new Map();
export async function imageURL(path) {
  if (!path) return "";
  if (path.startsWith("data:")) return path;
  if (!images.has(path)) {
    images.set(path, (async () => {
      const res = await send(path, { headers: bearer(getToken()) });
      if (!res.ok) throw new ApiError(res.status, null);
      return URL.createObjectURL(await res.blob());
    })().catch((e) => { images.delete(path); throw e; }));
  }
  return images.get(path);
}

export function clearImages() {
  for (const p of images.values()) p.then((u) => URL.revokeObjectURL(u)).catch(() => {});
  images.clear();
}
