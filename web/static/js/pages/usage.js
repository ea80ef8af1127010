import { get } from '../api.js';
import { h, barChart, notAvailable } from '../ui.js';

const monthStart = (d) => new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1)).toISOString().slice(0, 10);

// usage shows this month's GPU hours per day (billing's /v1/usage) and past invoices.
export async function usage(main) {
  const now = new Date();
  const from = monthStart(now);
  const to = monthStart(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)));
  main.append(h('h1', {}, 'Usage and invoices'), h('h2', {}, `This month (${from.slice(0, 7)})`));
  try {
    const u = await get(`/v1/usage?from=${from}&to=${to}&granularity=day`);
    const rows = u.rows || [];
    const days = [...new Set(rows.map((r) => r.bucket))].sort();
    const series = {};
    let gpuHours = 0, vmHours = 0;
    for (const r of rows) {
      const key = `${r.kind || 'gpu'}${r.tier ? ' ' + r.tier : ''}${r.gpu_model ? ' ' + r.gpu_model : ''}`;
      series[key] = series[key] || days.map(() => 0);
      series[key][days.indexOf(r.bucket)] += Number(r.gpu_hours || 0);
      gpuHours += Number(r.gpu_hours || 0);
      vmHours += Number(r.vm_hours || 0);
    }
    main.append(h('p', { 'data-testid': 'usage-total' }, `${gpuHours.toFixed(3)} GPU hours, ${vmHours.toFixed(3)} VM hours so far.`),
      days.length ? barChart(days, series, 'GPU hours') : h('p', { class: 'muted' }, 'No usage recorded this month.'));
  } catch (e) {
    main.append(notAvailable('Usage', e));
  }
  main.append(h('h2', {}, 'Invoices'));
  try {
    const inv = (await get('/v1/invoices')).items || [];
    main.append(inv.length ? h('table', { 'data-testid': 'invoices' },
      h('thead', {}, h('tr', {}, ['Period', 'Status', 'Total', 'Closed'].map((c) => h('th', {}, c)))),
      h('tbody', {}, inv.map((i) => h('tr', {}, h('td', {}, i.period), h('td', {}, i.status),
        h('td', { class: 'num' }, `${i.total} ${i.currency}`), h('td', {}, i.closed_at ? new Date(i.closed_at).toLocaleDateString() : '—')))))
      : h('p', { class: 'muted' }, 'No invoices yet.'));
  } catch (e) {
    main.append(notAvailable('Invoices', e));
  }
}
