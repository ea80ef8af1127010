import { api, all } from '../api.js';
import { h, field, showErrors, clearErrors, confirm, flash } from '../ui.js';

// volumes lists the tenant's volumes with a create form; each row attaches to one of the
// tenant's instances, detaches, or deletes (detached only). Storage is billed per GiB-hour.
export async function volumes(main) {
  const body = h('tbody');
  const refresh = async () => {
    const [list, insts] = await Promise.all([all('/v1/volumes'), all('/v1/instances')]);
    const live = insts.filter((i) => !['deleting', 'deleted', 'failed'].includes(i.state));
    const act = async (what, fn) => {
      try { await fn(); flash(what); } catch (e) { flash(e.message, true); }
      await refresh();
    };
    body.replaceChildren(...list.map((v) => {
      let cell;
      if (v.instance_id) {
        const inst = insts.find((i) => i.id === v.instance_id);
        cell = h('td', {}, `${inst ? inst.name : v.instance_id} (${v.device}) `,
          h('button', { onclick: () => act(`Volume ${v.name} detached.`, () => api('POST', `/v1/volumes/${v.id}/detach`)) }, 'Detach'));
      } else {
        const pick = h('select', { 'aria-label': `Instance for volume ${v.name}` },
          ...live.filter((i) => !v.host_id || i.host_id === v.host_id).map((i) => h('option', { value: i.id }, i.name)));
        cell = h('td', {}, pick, ' ',
          h('button', { disabled: !pick.options.length, onclick: () => act(`Volume ${v.name} attached.`,
            () => api('POST', `/v1/volumes/${v.id}/attach`, { instance_id: pick.value })) }, 'Attach'));
      }
      return h('tr', { 'data-name': v.name }, h('td', {}, v.name), h('td', {}, `${v.size_gib} GiB`), h('td', {}, v.state), cell,
        h('td', {}, h('button', { class: 'danger', disabled: !!v.instance_id, onclick: async () => {
          if (!await confirm(`Delete volume ${v.name}?`, 'Its data is deleted for good.', 'Delete')) return;
          await act(`Volume ${v.name} deleted.`, () => api('DELETE', `/v1/volumes/${v.id}`));
        } }, 'Delete')));
    }));
    if (!list.length) body.append(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'No volumes yet.')));
  };
  const name = h('input', { type: 'text', maxlength: 63, placeholder: 'data', autocomplete: 'off' });
  const size = h('input', { type: 'number', min: 1, max: 16384, value: 10 });
  const form = h('form', { class: 'grid card', novalidate: true }, ...field('Name', 'name', name),
    ...field('Size (GiB)', 'size_gib', size),
    h('span'), h('div', {}, h('button', { class: 'primary', type: 'submit' }, 'Create volume'), h('div', { class: 'field-error form-error' })));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(form);
    try {
      const v = await api('POST', '/v1/volumes', { name: name.value, size_gib: Number(size.value) });
      flash(`Volume ${v.name} created.`);
      name.value = '';
      await refresh();
    } catch (e) { showErrors(form, e); }
  });
  main.append(h('h1', {}, 'Volumes'),
    h('p', { class: 'muted' }, 'Disks that outlive instances: attached as /dev/vdb… (hotplugged into a running VM), kept when their instance is deleted. Billed per GiB-hour while they exist.'),
    form, h('table', { 'data-testid': 'volumes' }, h('thead', {}, h('tr', {}, ['Name', 'Size', 'State', 'Instance', ''].map((c) => h('th', {}, c)))), body));
  await refresh();
}
