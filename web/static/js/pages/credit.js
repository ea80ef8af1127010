import { api, all } from '../api.js';
import { h, field, showErrors, clearErrors, flash, money } from '../ui.js';

// creditSection is the tenant's prepaid credit (grants in draw order, what is left of each) and
// its monthly budget: thresholds that alert by webhook and the hard stop when credit runs out.
// A tenant admin edits the budget; members see it.
export async function creditSection(main, session) {
  const grants = h('tbody');
  const current = h('p', { 'data-testid': 'budget' });
  const refresh = async () => {
    const list = await all('/v1/credits');
    grants.replaceChildren(...list.map((g) => h('tr', {},
      h('td', { class: 'num' }, money(g.amount_cents)), h('td', { class: 'num' }, money(g.remaining_cents)),
      h('td', { class: 'num' }, g.priority), h('td', {}, g.expires_at ? new Date(g.expires_at).toLocaleDateString() : 'never'),
      h('td', {}, g.note || ''))));
    if (!list.length) grants.append(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'No prepaid credit: usage is invoiced after the month.')));
    try {
      const b = await api('GET', '/v1/budget');
      current.textContent = `Monthly budget ${money(b.limit_cents)}, alerts at ${b.thresholds.join(', ')}%, hard stop: ${b.hard_stop}.`;
      return b;
    } catch (e) {
      if (e.status !== 404) throw e;
      current.textContent = 'No monthly budget.';
      return null;
    }
  };
  main.append(h('h2', {}, 'Prepaid credit and budget'),
    h('table', { 'data-testid': 'credits' }, h('thead', {}, h('tr', {}, ['Granted', 'Left', 'Priority', 'Expires', 'Note'].map((c) => h('th', {}, c)))), grants),
    current);
  const b = await refresh();
  if (session.me.role !== 'tenant-admin') return;
  const limit = h('input', { type: 'number', min: 0.01, step: 0.01, value: b ? b.limit_cents / 100 : '' });
  const thresholds = h('input', { type: 'text', value: b ? b.thresholds.join(', ') : '50, 80, 100' });
  const stop = h('select', {}, [['none', 'none: alerts only'], ['block_create', 'no new instances when credit is exhausted'],
    ['stop_instances', 'also stop running instances when credit is exhausted']].map(([v, l]) => h('option', { value: v }, l)));
  if (b) stop.value = b.hard_stop;
  const form = h('form', { class: 'grid card', novalidate: true }, ...field('Budget (USD per month)', 'limit_cents', limit),
    ...field('Alert thresholds (%)', 'thresholds', thresholds, 'ascending, comma-separated'),
    ...field('Hard stop', 'hard_stop', stop, 'a credit.low webhook warns first'),
    h('span'), h('div', {}, h('button', { class: 'primary', type: 'submit' }, 'Save budget'), h('div', { class: 'field-error form-error' })));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(form);
    try {
      await api('PUT', '/v1/budget', { limit_cents: Math.round(Number(limit.value) * 100),
        thresholds: thresholds.value.split(',').map((s) => s.trim()).filter(Boolean).map(Number), hard_stop: stop.value });
      flash('Budget saved.');
      await refresh();
    } catch (e) { showErrors(form, e); }
  });
  main.append(form);
}
