// Small DOM helpers shared by the pages: element building, flash messages, confirmation,
// field errors from problem+json, formatting, polling and a dependency-free SVG bar chart.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function flash(text, isError = false) {
  const box = document.getElementById('flash');
  box.replaceChildren(h('div', { class: 'msg' + (isError ? ' error' : '') }, text));
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => box.replaceChildren(), 6000);
}

// confirm asks in a modal dialog (keyboard: Enter confirms, Escape cancels).
export function confirm(title, text, okLabel = 'Confirm') {
  const dlg = document.getElementById('confirm');
  dlg.querySelector('#confirm-title').textContent = title;
  dlg.querySelector('#confirm-text').textContent = text;
  dlg.querySelector('#confirm-ok').textContent = okLabel;
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), { once: true });
    dlg.returnValue = 'cancel';
    dlg.showModal();
    dlg.querySelector('#confirm-ok').focus();
  });
}

// field is a labelled form row with a slot for the API's error about it.
export function field(label, name, input, hint) {
  input.id = input.id || 'f-' + name;
  input.name = name;
  input.setAttribute('aria-describedby', 'err-' + name);
  return [h('label', { for: input.id }, label),
    h('div', {}, input, hint ? h('div', { class: 'muted' }, hint) : null,
      h('div', { class: 'field-error', id: 'err-' + name, 'data-field': name, role: 'alert' }))];
}

export function clearErrors(form) {
  form.querySelectorAll('.field-error').forEach((e) => { e.textContent = ''; });
  form.querySelectorAll('[aria-invalid]').forEach((e) => e.removeAttribute('aria-invalid'));
  const g = form.querySelector('.form-error');
  if (g) g.textContent = '';
}

// showErrors puts each problem+json field error next to its field, the rest at the form's foot.
export function showErrors(form, err) {
  clearErrors(form);
  const general = form.querySelector('.form-error');
  let placed = false;
  for (const f of err.fields || []) {
    const slot = form.querySelector(`.field-error[data-field="${CSS.escape(f.field)}"]`);
    if (slot) {
      slot.textContent = f.reason;
      const input = form.querySelector(`[name="${CSS.escape(f.field)}"]`);
      if (input) input.setAttribute('aria-invalid', 'true');
      if (!placed && input) input.focus();
      placed = true;
    } else if (general) {
      general.textContent += `${f.field}: ${f.reason}. `;
    }
  }
  if (!placed && general && !general.textContent) general.textContent = err.message;
}

export function money(minor, currency = 'USD') {
  return new Intl.NumberFormat('en-US', { style: 'currency', currency }).format(minor / 100);
}

export function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${Math.round(n * 10) / 10} ${units[i]}`;
}

export const busyStates = ['pending', 'provisioning', 'stopping', 'deleting'];

export function stateBadge(state) {
  const busy = busyStates.includes(state);
  return h('span', { class: 'badge ' + (busy ? 'busy' : state), 'data-state': state },
    busy ? h('span', { class: 'spinner', 'aria-hidden': 'true' }) : null, state);
}

// Conditions that are not "True": the instance's host or GPU server stopped reporting, so its
// shown state may be stale (the API keeps the last observed state; see docs/ARCHITECTURE.md, "Instance conditions").
export function unhealthy(inst) {
  return (inst.conditions || []).filter((c) => c.status !== 'True');
}

const conditionLabels = { HostReachable: 'host unreachable', GPUServerReachable: 'GPU server unreachable' };

export function conditionBadges(inst) {
  return unhealthy(inst).map((c) => h('span', { class: 'badge unreachable', 'data-condition': c.type, title: c.message || '' },
    '⚠ ', conditionLabels[c.type] || `${c.type}: ${c.status}`));
}

// conditionWarning is the details page's notice, or null when all is well.
export function conditionWarning(inst) {
  const bad = unhealthy(inst);
  if (!bad.length) return null;
  return h('div', { class: 'warning', role: 'alert', 'data-testid': 'conditions' },
    h('strong', {}, 'This VM may be unavailable.'),
    h('ul', {}, bad.map((c) => h('li', { 'data-condition': c.type },
      `${conditionLabels[c.type] || c.type}${c.since ? ' since ' + new Date(c.since).toLocaleString() : ''}: ${c.message || ''}`))));
}

export function usageBar(used, total, label) {
  const pct = total > 0 ? Math.min(100, Math.round((used / total) * 100)) : 0;
  const fill = h('span');
  fill.style.width = pct + '%';
  return h('div', { title: label },
    h('div', { class: 'bar', role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': total, 'aria-valuenow': used, 'aria-label': label }, fill),
    h('small', { class: 'muted' }, `${label}: ${pct}%`));
}

// poll runs fn now and every ms until the page changes (the router bumps the generation).
let generation = 0;
export function newPage() { generation++; }
export function poll(fn, ms) {
  const mine = generation;
  const tick = async () => {
    if (mine !== generation) return;
    try { await fn(); } catch (e) { console.warn('poll', e); }
    if (mine === generation) setTimeout(tick, ms);
  };
  return tick();
}
export function pageAlive() { const mine = generation; return () => mine === generation; }

const palette = ['#2255cc', '#e07b00', '#1a7f37', '#8250df', '#b42318', '#0a7ea4'];

// barChart draws stacked bars: labels on x, one series per key of series ({name: [values]}).
// barChart stacks the series in one bar per label, or with grouped puts them side by side (for
// series that must not add up, e.g. held beside utilised); tick shortens a label under the axis
// (default: a date's MM-DD).
export function barChart(labels, series, unit, { tick = (lab) => lab.slice(5) || lab, grouped = false } = {}) {
  const ns = 'http://www.w3.org/2000/svg';
  const W = 900, H = 240, L = 50, B = 30, T = 10;
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('class', 'chart');
  svg.setAttribute('role', 'img');
  const names = Object.keys(series);
  const totals = labels.map((_, i) => names.reduce((s, n) => s + (series[n][i] || 0), 0));
  const max = Math.max(1e-9, ...(grouped ? names.flatMap((n) => series[n]) : totals));
  svg.setAttribute('aria-label', `${unit} over ${labels.length} buckets, highest ${max.toPrecision(3)}`);
  const mk = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
    return e;
  };
  mk('line', { x1: L, y1: H - B, x2: W, y2: H - B, stroke: '#d9dde3' });
  for (const f of [0.5, 1]) mk('text', { x: 4, y: T + (1 - f) * (H - B - T) + 4 }, Number((max * f).toPrecision(2)).toString());
  const bw = (W - L) / Math.max(1, labels.length);
  labels.forEach((lab, i) => {
    let y = H - B;
    names.forEach((n, si) => {
      const v = series[n][i] || 0;
      const bh = (v / max) * (H - B - T);
      const sw = grouped ? (bw * 0.7) / names.length : bw * 0.7;
      y = grouped ? H - B - bh : y - bh;
      const r = mk('rect', { x: L + i * bw + bw * 0.15 + (grouped ? si * sw : 0), y, width: sw, height: bh, fill: palette[si % palette.length] });
      const t = document.createElementNS(ns, 'title');
      t.textContent = `${lab} ${n}: ${v.toFixed(3)} ${unit}`;
      r.append(t);
    });
    if (labels.length <= 16 || i % Math.ceil(labels.length / 16) === 0) {
      mk('text', { x: L + i * bw + bw / 2, y: H - 10, 'text-anchor': 'middle' }, tick(lab));
    }
  });
  const legend = h('div', { class: 'legend' }, names.map((n, si) => {
    const sw = h('i');
    sw.style.background = palette[si % palette.length];
    return h('span', {}, sw, n);
  }));
  return h('figure', {}, svg, legend);
}

export function notAvailable(what, err) {
  return h('div', { class: 'card muted', 'data-testid': 'not-available' },
    `${what} is not available on this server (${err.status === 404 ? 'the billing API is not installed' : err.message}).`);
}
