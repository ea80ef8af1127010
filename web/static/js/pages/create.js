import { api, all } from '../api.js';
import { h, field, showErrors, clearErrors, money, bytes } from '../ui.js';

// createInstance is the GPU VM form: pick model, tier and count, which narrow the instance
// types; the price per hour is shown on a review step before anything is created.
export async function createInstance(main) {
  const [models, types, images, sshKeys] = await Promise.all([all('/v1/gpu-models'), all('/v1/instance-types'), all('/v1/images'),
    all('/v1/ssh-keys').catch(() => [])]);
  const modelName = Object.fromEntries(models.map((m) => [m.id, m]));
  const opt = (value, label) => h('option', { value }, label);
  const model = h('select', {}, opt('', 'Any / none'), models.map((m) => opt(m.id, `${m.name} (${bytes(m.memory_bytes)})`)));
  const tier = h('select', {}, opt('', 'Any'), opt('dedicated', 'Dedicated: whole GPUs'), opt('shared', 'Shared: a slice of GPU memory'));
  const counts = [...new Set(types.map((t) => t.gpu_count))].sort((a, b) => a - b);
  const count = h('select', {}, opt('', 'Any'), counts.map((c) => opt(String(c), String(c))));
  const type = h('select', { required: true });
  const name = h('input', { type: 'text', placeholder: 'my-training-vm', maxlength: 63, autocomplete: 'off' });
  // Only registered images boot; the list says which carry gpucloud's guest libraries (CUDA
  // programs run as they are) and the disk each needs.
  const image = h('select', { required: true }, opt('', images.length ? 'Choose an image' : 'No image registered'),
    images.map((m) => opt(m.name, `${m.name}${m.guest_libraries ? ' (gpucloud guest libraries)' : ''}, disk ≥ ${m.min_disk_gib} GiB`)));
  if (images.length === 1) image.value = images[0].name;
  const sshKey = h('textarea', { placeholder: 'ssh-ed25519 AAAA… you@laptop' });
  const keyBoxes = sshKeys.map((k) => h('input', { type: 'checkbox', value: k.id, checked: true, 'aria-label': `SSH key ${k.name}` }));
  const keyList = h('div', { 'data-testid': 'ssh-key-choice' }, sshKeys.length
    ? sshKeys.map((k, i) => h('label', { class: 'check' }, keyBoxes[i], ` ${k.name} `, h('code', {}, k.fingerprint)))
    : h('span', { class: 'muted' }, 'None yet (add them under API keys), or paste one below.'));
  const userData = h('textarea', { placeholder: '#cloud-config\npackages: [htop]', rows: 4 });
  const price = h('p', { class: 'price', 'data-testid': 'price', 'aria-live': 'polite' });
  const review = h('button', { type: 'submit', class: 'primary' }, 'Review');
  const progress = h('div', { role: 'status' });
  const form = h('form', { class: 'grid card', novalidate: true },
    ...field('GPU model', 'gpu_model', model), ...field('Tier', 'tier', tier), ...field('GPU count', 'gpu_count', count),
    ...field('Instance type', 'instance_type_id', type), ...field('Name', 'name', name, 'lower-case letters, digits and "-"'),
    ...field('Image', 'image', image), h('span', {}, 'Your SSH keys'), keyList,
    ...field('SSH public key', 'ssh_key', sshKey, 'optional, besides the keys chosen above'),
    ...field('User data', 'user_data', userData, 'optional cloud-init: #cloud-config YAML or a #! script, at most 16 KiB'),
    h('span', {}, 'Price'), price,
    h('span'), h('div', {}, h('div', { class: 'row' }, review, h('a', { class: 'button', href: '#/instances' }, 'Cancel')),
      h('div', { class: 'field-error form-error', role: 'alert' }), progress));

  const selected = () => types.find((t) => t.id === type.value);
  const refilter = () => {
    const keep = type.value;
    const fit = types.filter((t) => (!model.value || t.gpu_model_id === model.value) && (!tier.value || t.tier === tier.value) &&
      (count.value === '' || t.gpu_count === Number(count.value)));
    type.replaceChildren(opt('', fit.length ? 'Choose an instance type' : 'No instance type matches'), ...fit.map((t) => {
      const gpu = t.gpu_count ? `${t.gpu_count} × ${(modelName[t.gpu_model_id] || {}).name || 'GPU'} ${t.tier}` : 'no GPU';
      return opt(t.id, `${t.name}: ${gpu}, ${t.vcpus} vCPU, ${t.memory_mib} MiB, ${money(t.price_per_hour, t.currency)}/h`);
    }));
    if (fit.some((t) => t.id === keep)) type.value = keep;
    showPrice();
  };
  const showPrice = () => {
    const t = selected();
    price.textContent = t ? `${money(t.price_per_hour, t.currency)} per hour` : '—';
  };
  [model, tier, count].forEach((s) => s.addEventListener('change', refilter));
  type.addEventListener('change', showPrice);
  refilter();

  let confirming = false;
  const reset = () => { confirming = false; review.textContent = 'Review'; };
  [type, name, image, sshKey].forEach((e) => e.addEventListener('input', reset));
  image.addEventListener('change', reset);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(form);
    const local = [];
    if (!type.value) local.push({ field: 'instance_type_id', reason: 'choose an instance type' });
    if (!/^[a-z0-9-]{1,63}$/.test(name.value)) local.push({ field: 'name', reason: '1-63 characters: lower-case letters, digits and "-"' });
    if (!image.value) local.push({ field: 'image', reason: 'choose an image' });
    if (local.length) { showErrors(form, { fields: local }); reset(); return; }
    if (!confirming) {
      // First press: show what it costs and ask again.
      const t = selected();
      confirming = true;
      review.textContent = `Confirm: create for ${money(t.price_per_hour, t.currency)}/hour`;
      review.focus();
      return;
    }
    review.disabled = true;
    progress.replaceChildren(h('span', { class: 'progress' }, h('span', { class: 'spinner' }), 'Placing the VM…'));
    try {
      const body = { name: name.value, instance_type_id: type.value, image: image.value };
      if (sshKey.value.trim()) body.ssh_key = sshKey.value.trim();
      const ids = keyBoxes.filter((b) => b.checked).map((b) => b.value);
      if (ids.length) body.ssh_key_ids = ids;
      if (userData.value.trim()) body.user_data = userData.value;
      const inst = await api('POST', '/v1/instances', body);
      location.hash = `#/instances/${inst.id}`;
    } catch (e) {
      progress.replaceChildren();
      showErrors(form, e);
      reset();
    } finally {
      review.disabled = false;
    }
  });
  main.append(h('h1', {}, 'Create a GPU VM'), form);
  model.focus();
}
