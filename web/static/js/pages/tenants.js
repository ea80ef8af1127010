import { api, all } from '../api.js';
import { h, field, showErrors, clearErrors, flash, bytes } from '../ui.js';

const GiB = 1024 ** 3;

// quotaForm edits one tenant's quotas in place; API field errors land next to their inputs.
function quotaForm(t, done) {
  const inst = h('input', { type: 'number', min: 0, value: t.quota_instances });
  const gpus = h('input', { type: 'number', min: 0, value: t.quota_gpus });
  const mem = h('input', { type: 'number', min: 0, step: 1, value: Math.round(t.quota_gpu_memory_bytes / GiB) });
  const form = h('form', { class: 'grid card', novalidate: true, 'aria-label': `Quotas of ${t.name}` },
    ...field('Instances', 'instances', inst), ...field('GPUs', 'gpus', gpus), ...field('GPU memory (GiB)', 'gpu_memory_bytes', mem),
    h('span'), h('div', {}, h('div', { class: 'row' }, h('button', { class: 'primary', type: 'submit' }, 'Save quotas'),
      h('button', { type: 'button', onclick: done }, 'Cancel')), h('div', { class: 'field-error form-error' })));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(form);
    try {
      await api('PUT', `/v1/tenants/${t.id}/quota`, { instances: Number(inst.value), gpus: Number(gpus.value),
        gpu_memory_bytes: Math.round(Number(mem.value) * GiB) });
      flash(`Quotas of ${t.name} saved.`);
      await done();
    } catch (e) { showErrors(form, e); }
  });
  return form;
}

export async function tenants(main, session) {
  const body = h('tbody');
  const editor = h('div');
  const canEdit = session.me.role === 'operator';
  const refresh = async () => {
    editor.replaceChildren();
    const list = await all('/v1/tenants');
    body.replaceChildren(...list.map((t) => h('tr', { 'data-name': t.name },
      h('td', {}, t.name), h('td', { class: 'num' }, `${t.used_instances} / ${t.quota_instances}`),
      h('td', { class: 'num' }, `${t.used_gpus} / ${t.quota_gpus}`),
      h('td', { class: 'num' }, `${bytes(t.used_gpu_memory_bytes)} / ${bytes(t.quota_gpu_memory_bytes)}`),
      h('td', {}, canEdit ? h('button', { onclick: () => { editor.replaceChildren(h('h2', {}, `Quotas of ${t.name}`), quotaForm(t, refresh)); editor.querySelector('input').focus(); } }, 'Edit quotas') : null))));
  };
  main.append(h('h1', {}, 'Tenants and quotas'),
    h('table', { 'data-testid': 'tenants' }, h('thead', {}, h('tr', {}, ['Tenant', 'Instances', 'GPUs', 'GPU memory', ''].map((c) => h('th', {}, c)))), body), editor);
  await refresh();
}
