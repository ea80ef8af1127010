import { api, all } from '../api.js';
import { h, field, showErrors, clearErrors, confirm, flash } from '../ui.js';
import { sshKeysSection } from './sshkeys.js';

export async function keys(main, session) {
  const uid = session.me.user_id;
  const body = h('tbody');
  const secretBox = h('div', { 'aria-live': 'polite' });
  const refresh = async () => {
    const list = await all(`/v1/users/${uid}/api-keys`);
    body.replaceChildren(...list.map((k) => h('tr', { 'data-name': k.name },
      h('td', {}, k.name || '(unnamed)'), h('td', {}, h('code', {}, k.prefix + '…')),
      h('td', {}, new Date(k.created_at).toLocaleString()),
      h('td', {}, k.last_used_at ? new Date(k.last_used_at).toLocaleString() : 'never'),
      h('td', {}, k.revoked_at ? 'revoked' : h('button', { class: 'danger', onclick: async () => {
        if (!await confirm(`Revoke key ${k.name || k.prefix}?`, 'Programs using it stop working at once.', 'Revoke')) return;
        try { await api('DELETE', `/v1/api-keys/${k.id}`); flash('Key revoked.'); } catch (e) { flash(e.message, true); }
        await refresh();
      } }, 'Revoke')))));
    if (!list.length) body.append(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'No API keys.')));
  };

  const name = h('input', { type: 'text', maxlength: 100, placeholder: 'ci-pipeline' });
  const create = h('form', { class: 'grid card', novalidate: true }, ...field('Key name', 'name', name),
    h('span'), h('div', {}, h('button', { class: 'primary', type: 'submit' }, 'Create key'), h('div', { class: 'field-error form-error' })));
  create.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(create);
    try {
      const k = await api('POST', `/v1/users/${uid}/api-keys`, { name: name.value });
      secretBox.replaceChildren(h('div', { class: 'card' }, h('p', {}, 'Copy the key now: it is shown only once.'),
        h('div', { class: 'secret', 'data-testid': 'new-secret' }, k.secret)));
      name.value = '';
      await refresh();
    } catch (e) { showErrors(create, e); }
  });

  const cur = h('input', { type: 'password', autocomplete: 'current-password' });
  const next = h('input', { type: 'password', autocomplete: 'new-password' });
  const pw = h('form', { class: 'grid card', novalidate: true }, ...field('Current password', 'current_password', cur),
    ...field('New password', 'new_password', next, '10-72 characters'),
    h('span'), h('div', {}, h('button', { type: 'submit' }, 'Change password'), h('div', { class: 'field-error form-error' })));
  pw.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(pw);
    try {
      await api('PUT', `/v1/users/${uid}/password`, { current_password: cur.value, new_password: next.value });
      // Setting a password ends the user's sessions, this one included.
      session.me = session.user = null;
      flash('Password changed; sign in again with the new one.');
      location.hash = '#/signin';
    } catch (e) { showErrors(pw, e); }
  });

  main.append(h('h1', {}, 'API keys'), secretBox, create,
    h('table', { 'data-testid': 'keys' }, h('thead', {}, h('tr', {}, ['Name', 'Prefix', 'Created', 'Last used', ''].map((c) => h('th', {}, c)))), body),
    h('h2', {}, 'Console password'), pw);
  if (session.me.tenant_id) { // SSH keys are for VMs: tenant users only
    const ssh = sshKeysSection();
    main.append(ssh.section);
    await ssh.refresh();
  }
  await refresh();
}
