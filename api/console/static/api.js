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

export async function api(path, { method = "GET", json, form, token } = {}) {
  const headers = {};
  const tok = token === undefined ? getToken() : token;
  if (tok) headers.Authorization = `Bearer ${tok}`;
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form) {
    body = form;
  }
  const res = await fetch(path, { method, headers, body });
  const ctype = res.headers.get("content-type") || "";
  const data = ctype.includes("json") ? await res.json() : await res.text();
  if (!res.ok) {
    if (res.status === 401 && token === undefined) window.dispatchEvent(new CustomEvent("yana:unauthorized"));
    throw new ApiError(res.status, data);
  }
  return data;
}

// <img> cannot send a bearer token: fetch the image with it and show it as a blob: URL.
const images = new Map();
export async function imageURL(path) {
  if (!path) return "";
  if (path.startsWith("data:")) return path;
  if (!images.has(path)) {
    images.set(path, (async () => {
      const headers = {};
      const tok = getToken();
      if (tok) headers.Authorization = `Bearer ${tok}`;
      const res = await fetch(path, { headers });
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
