import { raw, get } from '../api.js';
import { h, field, showErrors, clearErrors, barChart, notAvailable } from '../ui.js';

const iso = (d) => d.toISOString().slice(0, 10);

// reports is finance's GPU-hour report per tier and day, with a chart and a CSV download of
// exactly what the API returns for the same query.
export async function reports(main) {
  const now = new Date();
  const from = h('input', { type: 'date', value: iso(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1))) });
  const to = h('input', { type: 'date', value: iso(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1))) });
  const out = h('div');
  const csv = h('button', { type: 'button', 'data-testid': 'download-csv' }, 'Download CSV');
  const form = h('form', { class: 'grid card', novalidate: true }, ...field('From', 'from', from), ...field('To (exclusive)', 'to', to),
    h('span'), h('div', {}, h('div', { class: 'row' }, h('button', { class: 'primary', type: 'submit' }, 'Show report'), csv),
      h('div', { class: 'field-error form-error' })));
  const query = (fmt) => `/v1/reports/gpu-hours?from=${from.value}&to=${to.value}&group_by=tier&granularity=day${fmt ? '&format=' + fmt : ''}`;
  const show = async () => {
    clearErrors(form);
    out.replaceChildren(h('p', { class: 'progress' }, h('span', { class: 'spinner' }), 'Loading…'));
    try {
      const rep = await get(query());
      const rows = rep.rows || [];
      const days = [...new Set(rows.map((r) => r.bucket))].sort();
      const series = {};
      for (const r of rows) {
        series[r.group] = series[r.group] || days.map(() => 0);
        series[r.group][days.indexOf(r.bucket)] += Number(r.gpu_hours);
      }
      out.replaceChildren(
        days.length ? barChart(days, series, 'GPU hours') : h('p', { class: 'muted' }, 'No usage in this period.'),
        h('table', { 'data-testid': 'report' },
          h('thead', {}, h('tr', {}, ['Day', 'Tier', 'GPU hours', 'Records', `Revenue (${rep.currency || ''})`].map((c) => h('th', {}, c)))),
          h('tbody', {}, rows.map((r) => h('tr', {}, h('td', {}, r.bucket), h('td', {}, r.group), h('td', { class: 'num' }, r.gpu_hours),
            h('td', { class: 'num' }, r.records), h('td', { class: 'num' }, r.revenue))))));
    } catch (e) {
      if (e.status === 404 && !e.fields.length) { out.replaceChildren(notAvailable('The GPU-hour report', e)); return; }
      out.replaceChildren();
      showErrors(form, e);
    }
  };
  form.addEventListener('submit', (ev) => { ev.preventDefault(); show(); });
  csv.addEventListener('click', async () => {
    clearErrors(form);
    try {
      const resp = await raw('GET', query('csv'), undefined, 'text/csv');
      const url = URL.createObjectURL(await resp.blob());
      const a = h('a', { href: url, download: `gpu-hours-${from.value}-${to.value}.csv` });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) { showErrors(form, e); }
  });
  main.append(h('h1', {}, 'GPU hours by tier'), form, out);
  await show();
}
