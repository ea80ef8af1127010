import { api, all } from '../api.js';
import { h, field, showErrors, clearErrors, confirm, flash } from '../ui.js';

// sshKeysSection lists the user's SSH public keys (fingerprints as OpenSSH shows them) with a form
// to add one; VMs are created with the keys chosen on the create form.
export function sshKeysSection() {
  const body = h('tbody');
  const refresh = async () => {
    const list = await all('/v1/ssh-keys');
    body.replaceChildren(...list.map((k) => h('tr', { 'data-name': k.name },
      h('td', {}, k.name), h('td', {}, h('code', {}, k.fingerprint)), h('td', {}, new Date(k.created_at).toLocaleString()),
      h('td', {}, h('button', { class: 'danger', onclick: async () => {
        if (!await confirm(`Delete SSH key ${k.name}?`, 'VMs created with it keep it; new VMs cannot use it.', 'Delete')) return;
        try { await api('DELETE', `/v1/ssh-keys/${k.id}`); flash('SSH key deleted.'); } catch (e) { flash(e.message, true); }
        await refresh();
      } }, 'Delete')))));
    if (!list.length) body.append(h('tr', {}, h('td', { colspan: 4, class: 'muted' }, 'No SSH keys yet.')));
  };
  // Ids of their own: the API key form on the same page has a 'name' field too.
  const name = h('input', { type: 'text', maxlength: 63, placeholder: 'laptop', autocomplete: 'off', id: 'f-ssh-key-name' });
  const key = h('textarea', { placeholder: 'ssh-ed25519 AAAA… you@laptop (the contents of ~/.ssh/id_ed25519.pub)' });
  const form = h('form', { class: 'grid card', novalidate: true }, ...field('Name for this SSH key', 'name', name),
    ...field('Public key', 'public_key', key),
    h('span'), h('div', {}, h('button', { class: 'primary', type: 'submit' }, 'Add SSH key'), h('div', { class: 'field-error form-error' })));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(form);
    try {
      const k = await api('POST', '/v1/ssh-keys', { name: name.value, public_key: key.value });
      flash(`SSH key ${k.name} added (${k.fingerprint}).`);
      name.value = key.value = '';
      await refresh();
    } catch (e) { showErrors(form, e); }
  });
  const section = h('section', {}, h('h2', {}, 'SSH keys'),
    h('p', { class: 'muted' }, 'Public keys your VMs accept for root logins (ssh -p PORT root@HOST, shown on each VM).'), form,
    h('table', { 'data-testid': 'ssh-keys' }, h('thead', {}, h('tr', {}, ['Name', 'Fingerprint', 'Added', ''].map((c) => h('th', {}, c)))), body));
  return { section, refresh };
}
