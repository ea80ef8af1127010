import { raw, get } from '../api.js';
import { h, field, showErrors, clearErrors, barChart, notAvailable } from '../ui.js';

const month = (d) => d.toISOString().slice(0, 7);

// finance is the month-close report (/v1/reports/billing): per tier, GPU model or tenant, what
// tenants held (charged) beside what their CUDA sessions used (utilisation, not charged), and the
// revenue, as charts and a table, with the CSV the API serves for the same query.
export async function finance(main) {
  const now = new Date();
  const from = h('input', { type: 'month', value: month(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1))) });
  const groupBy = h('select', {}, ['tier', 'gpu_model', 'tenant', 'instance_type'].map((g) => h('option', { value: g }, g)));
  const out = h('div');
  const csv = h('button', { type: 'button', 'data-testid': 'download-billing-csv' }, 'Download CSV');
  const form = h('form', { class: 'grid card', novalidate: true }, ...field('Month', 'from', from), ...field('Group by', 'group_by', groupBy),
    h('span'), h('div', {}, h('div', { class: 'row' }, h('button', { class: 'primary', type: 'submit' }, 'Show'), csv),
      h('div', { class: 'field-error form-error' })));
  const query = (fmt) => {
    const [y, m] = from.value.split('-').map(Number);
    const to = new Date(Date.UTC(y, m, 1)).toISOString().slice(0, 7);
    return `/v1/reports/billing?from=${from.value}&to=${to}&group_by=${groupBy.value}${fmt ? '&format=' + fmt : ''}`;
  };
  const show = async () => {
    clearErrors(form);
    out.replaceChildren(h('p', { class: 'progress' }, h('span', { class: 'spinner' }), 'Loading…'));
    try {
      const rep = await get(query());
      const rows = rep.rows || [];
      const label = (r) => Object.values(r.group || {}).join(' / ') || 'all';
      const labels = rows.map(label);
      const tick = (l) => (l.length > 14 ? l.slice(0, 13) + '…' : l);
      const chart = (title, id, series, unit) => h('section', { 'data-testid': id }, h('h2', {}, title), barChart(labels, series, unit, { tick, grouped: true }));
      const t = rep.total || {};
      out.replaceChildren(
        h('p', { 'data-testid': 'billing-total' }, `Held ${t.held_gpu_hours || '0'} GPU-hours, utilised ${t.utilised_gpu_hours || '0'} GPU-hours; `,
          `revenue ${t.revenue || '0.00'} ${rep.currency || ''}`),
        ...(rows.length ? [
          chart(`Held vs utilised GPU-hours by ${groupBy.value}`, 'chart-hours', {
            held: rows.map((r) => Number(r.held_gpu_hours)), utilised: rows.map((r) => Number(r.utilised_gpu_hours)) }, 'GPU hours'),
          chart(`Revenue by ${groupBy.value}`, 'chart-revenue', { revenue: rows.map((r) => r.revenue_cents / 100) }, rep.currency || ''),
        ] : [h('p', { class: 'muted' }, 'Nothing held in this month.')]),
        h('table', { 'data-testid': 'billing-report' },
          h('thead', {}, h('tr', {}, [groupBy.value, 'Held GPU h', 'Utilised GPU h', 'Slice GiB h', 'VM h', 'Storage GiB h', `Revenue (${rep.currency || ''})`]
            .map((c) => h('th', {}, c)))),
          h('tbody', {}, rows.map((r) => h('tr', {}, h('td', {}, label(r)), [r.held_gpu_hours, r.utilised_gpu_hours, r.slice_gib_hours,
            r.vm_hours, r.storage_gib_hours, r.revenue].map((v) => h('td', { class: 'num' }, v)))))));
    } catch (e) {
      if (e.status === 404 && !e.fields.length) { out.replaceChildren(notAvailable('The month-close report', e)); return; }
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
      const a = h('a', { href: url, download: `billing-${from.value}-${groupBy.value}.csv` });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) { showErrors(form, e); }
  });
  main.append(h('h1', {}, 'Month close: held, utilised, revenue'), form, out);
  await show();
}
