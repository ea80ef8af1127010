// The console's only way to the server: the public REST API, signed in by the session cookie.
// Unsafe methods echo the CSRF token (double submit) that sign-in put in a readable cookie.

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }
  get fields() { return this.problem.fields || []; }
}

function cookie(name) {
  for (const part of document.cookie.split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) return decodeURIComponent(v.join('='));
  }
  return '';
}

let onUnauthenticated = () => {};
export function setUnauthenticatedHandler(fn) { onUnauthenticated = fn; }

// raw sends a request and returns the Response, throwing ApiError for non-2xx answers.
export async function raw(method, path, body, accept = 'application/json') {
  const headers = { Accept: accept };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (!['GET', 'HEAD'].includes(method)) headers['X-CSRF-Token'] = cookie('gpucloud_csrf');
  const resp = await fetch(path, { method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body) });
  if (resp.ok) return resp;
  let problem = null;
  try { problem = await resp.json(); } catch { /* not JSON */ }
  const err = new ApiError(resp.status, problem);
  if (resp.status === 401 && path !== '/v1/session') onUnauthenticated(err);
  throw err;
}

export async function api(method, path, body) {
  const resp = await raw(method, path, body);
  if (resp.status === 204) return null;
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path) => api('GET', path);

// all follows next_cursor through every page (bounded: 50 pages).
export async function all(path) {
  const out = [];
  let cursor = '';
  for (let i = 0; i < 50; i++) {
    const sep = path.includes('?') ? '&' : '?';
    const page = await get(path + sep + 'limit=200' + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''));
    out.push(...(page.items || []));
    if (!page.next_cursor) break;
    cursor = page.next_cursor;
  }
  return out;
}
