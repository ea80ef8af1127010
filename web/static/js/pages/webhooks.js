import { api, all } from '../api.js';
import { h, field, showErrors, clearErrors, confirm, flash } from '../ui.js';

const events = ['budget.threshold', 'credit.low', 'invoice.closed', 'instance.failed', 'instance.state'];

// webhooks lists the caller's webhook endpoints (a tenant admin: its own; finance: every one,
// with its owner), registers one (its signing secret shown once), deletes one, and shows an
// endpoint's delivery log: status, attempts, the receiver's last answer.
export async function webhooks(main, session) {
  const isFinance = !session.me.tenant_id;
  const body = h('tbody');
  const log = h('div', { 'aria-live': 'polite' });
  const secretBox = h('div', { 'aria-live': 'polite' });
  const showLog = async (ep) => {
    const items = await all(`/v1/webhooks/${ep.id}/deliveries`);
    log.replaceChildren(h('h2', {}, `Deliveries to ${ep.url}`),
      h('table', { 'data-testid': 'deliveries' },
        h('thead', {}, h('tr', {}, ['Event', 'Status', 'Attempts', 'Last answer', 'Created', 'Delivered'].map((c) => h('th', {}, c)))),
        h('tbody', {}, items.length ? items.map((d) => h('tr', { 'data-status': d.status },
          h('td', {}, d.event_type), h('td', {}, d.status), h('td', { class: 'num' }, d.attempts),
          h('td', {}, d.last_status ? String(d.last_status) : (d.last_error || '—')),
          h('td', {}, new Date(d.created_at).toLocaleString()),
          h('td', {}, d.delivered_at ? new Date(d.delivered_at).toLocaleString() : '—')))
          : h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'No deliveries yet.')))));
  };
  const refresh = async () => {
    const list = await all('/v1/webhooks');
    body.replaceChildren(...list.map((ep) => h('tr', { 'data-url': ep.url },
      h('td', {}, h('code', {}, ep.url)), h('td', {}, ep.events.join(', ')),
      isFinance ? h('td', {}, ep.tenant_id || 'every tenant') : null,
      isFinance ? h('td', {}, ep.owner) : null,
      h('td', {}, h('div', { class: 'row' },
        h('button', { type: 'button', 'aria-label': `deliveries of ${ep.url}`, onclick: () => showLog(ep).catch((e) => flash(e.message, true)) }, 'Deliveries'),
        h('button', { type: 'button', class: 'danger', 'aria-label': `delete ${ep.url}`, onclick: async () => {
          if (!await confirm(`Delete the endpoint ${ep.url}?`, 'Its pending deliveries are dropped; its log is kept.', 'Delete')) return;
          try { await api('DELETE', `/v1/webhooks/${ep.id}`); flash('Endpoint deleted.'); log.replaceChildren(); } catch (e) { flash(e.message, true); }
          await refresh();
        } }, 'Delete'))))));
    if (!list.length) body.append(h('tr', {}, h('td', { colspan: isFinance ? 5 : 3, class: 'muted' }, 'No webhook endpoints.')));
  };

  const url = h('input', { type: 'url', placeholder: 'https://example.com/hooks/gpucloud' });
  const boxes = events.map((e) => h('input', { type: 'checkbox', value: e, id: 'ev-' + e }));
  const tenant = h('input', { type: 'text', placeholder: 'empty: every tenant' });
  const create = h('form', { class: 'grid card', novalidate: true }, ...field('Endpoint URL', 'url', url),
    h('span', {}, 'Events'), h('div', {}, h('div', { class: 'row' }, boxes.map((b) => h('label', { for: b.id }, b, ' ' + b.value))),
      h('div', { class: 'field-error', 'data-field': 'events', role: 'alert' })),
    ...(isFinance ? field('Tenant id', 'tenant_id', tenant, "finance's endpoint: the tenant does not see it") : []),
    h('span'), h('div', {}, h('button', { class: 'primary', type: 'submit' }, 'Add endpoint'), h('div', { class: 'field-error form-error' })));
  create.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(create);
    const req = { url: url.value, events: boxes.filter((b) => b.checked).map((b) => b.value) };
    if (isFinance && tenant.value) req.tenant_id = tenant.value;
    try {
      const ep = await api('POST', '/v1/webhooks', req);
      secretBox.replaceChildren(h('div', { class: 'card' }, h('p', {}, 'Copy the signing secret now: it is shown only once.'),
        h('div', { class: 'secret', 'data-testid': 'webhook-secret' }, ep.secret)));
      url.value = '';
      await refresh();
    } catch (e) { showErrors(create, e); }
  });

  const cols = ['URL', 'Events', ...(isFinance ? ['Tenant', 'Owner'] : []), ''];
  main.append(h('h1', {}, 'Webhooks'),
    h('p', { class: 'muted' }, 'Signed POSTs (header Gpucloud-Signature: HMAC-SHA256 of the timestamp and body) for budget, credit, invoice and instance events, retried with backoff.'),
    secretBox, create,
    h('table', { 'data-testid': 'webhooks' }, h('thead', {}, h('tr', {}, cols.map((c) => h('th', {}, c)))), body), log);
  await refresh();
}
