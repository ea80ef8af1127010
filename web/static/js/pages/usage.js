import { get } from '../api.js';
import { h, barChart, notAvailable, money } from '../ui.js';
import { creditSection } from './credit.js';

const monthStart = (d) => new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1)).toISOString().slice(0, 10);

// quantity mirrors billing's price units: dedicated GPUs per GPU-hour, shared slices per GiB-hour
// of their memory quota, VMs per VM-hour.
function quantity(r) {
  if (r.kind === 'vm') return { unit: 'vm-hour', qty: Number(r.vm_hours || 0) };
  if (r.tier === 'shared') return { unit: 'gib-hour', qty: Number(r.quota_mib_ms || 0) / 1024 / 3.6e6 };
  return { unit: 'gpu-hour', qty: Number(r.gpu_hours || 0) };
}

// priceFor is the entry in force now for the row's key (the latest effective one), if any.
function priceFor(prices, r, unit) {
  const now = Date.now();
  return prices.filter((p) => p.kind === (r.kind || 'gpu') && p.unit === unit && new Date(p.effective_from) <= now &&
    (p.kind === 'vm' ? p.instance_type === r.instance_type : p.gpu_model === r.gpu_model && p.tier === r.tier))
    .sort((a, b) => new Date(b.effective_from) - new Date(a.effective_from))[0];
}

// usage shows this month's charges so far and the balance (/v1/balance), the utilisation (GPU
// hours inside sessions) and what it would cost at today's prices per day (/v1/usage,
// /v1/prices), and past invoices (/v1/invoices). Invoices are authoritative.
export async function usage(main, session) {
  const now = new Date();
  const from = monthStart(now);
  const to = monthStart(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)));
  main.append(h('h1', {}, 'Usage and invoices'), h('h2', {}, `This month (${from.slice(0, 7)})`));
  // What is charged: what the tenant's instances hold (GPUs or slices and VMs while running,
  // disks while they exist), by the second, at the price book's prices; and prepaid credit.
  try {
    const { balance: b, budget } = await get('/v1/balance');
    main.append(h('p', { 'data-testid': 'month-charges' },
      h('strong', {}, `Charges so far: ${money(b.month_to_date_cents, b.currency)}`),
      ` (what your instances hold, by the second); prepaid credit ${money(b.credit_cents, b.currency)}, balance ${money(b.balance_cents, b.currency)}`,
      budget ? `; monthly budget ${money(budget.limit_cents, b.currency)}` : '',
      (b.unpriced || []).length ? ' (some of it has no price yet)' : '', '.'));
  } catch (e) {
    main.append(notAvailable('Balance', e));
  }
  try {
    await creditSection(main, session);
  } catch (e) {
    main.append(notAvailable('Credit and budget', e));
  }
  try {
    const u = await get(`/v1/usage?from=${from}&to=${to}&granularity=day`);
    const prices = ((await get('/v1/prices').catch(() => ({ items: [] }))).items) || [];
    const rows = u.rows || [];
    const days = [...new Set(rows.map((r) => r.bucket))].sort();
    const hours = {};
    const cost = {};
    let gpuHours = 0, vmHours = 0, cents = 0, unpriced = 0, currency = 'USD';
    for (const r of rows) {
      const key = `${r.kind || 'gpu'}${r.tier ? ' ' + r.tier : ''}${r.gpu_model ? ' ' + r.gpu_model : ''}${r.instance_type ? ' ' + r.instance_type : ''}`;
      const d = days.indexOf(r.bucket);
      hours[key] = hours[key] || days.map(() => 0);
      hours[key][d] += Number(r.gpu_hours || 0) + Number(r.vm_hours || 0);
      gpuHours += Number(r.gpu_hours || 0);
      vmHours += Number(r.vm_hours || 0);
      const { unit, qty } = quantity(r);
      const p = priceFor(prices, r, unit);
      if (!p) { unpriced += qty; continue; }
      currency = p.currency;
      const c = (qty * p.unit_price_micros) / 1e4; // micros per unit -> cents
      cost[key] = cost[key] || days.map(() => 0);
      cost[key][d] += c;
      cents += c;
    }
    main.append(h('p', { 'data-testid': 'usage-total' }, `Utilisation (inside CUDA sessions; shown, not charged): ${gpuHours.toFixed(3)} GPU hours, ${vmHours.toFixed(3)} VM hours so far; `,
      h('strong', { 'data-testid': 'estimated-cost' }, `estimated cost ${money(Math.round(cents), currency)}`),
      unpriced > 0 ? ' (some usage has no price yet)' : '', '.'));
    if (!days.length) {
      main.append(h('p', { class: 'muted' }, 'No usage recorded this month.'));
    } else {
      main.append(h('h3', {}, 'Hours per day'), barChart(days, hours, 'hours'));
      if (cents > 0) main.append(h('h3', {}, `Estimated cost per day (${currency})`), barChart(days, Object.fromEntries(Object.entries(cost).map(([k, v]) => [k, v.map((c) => c / 100)])), currency));
    }
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
