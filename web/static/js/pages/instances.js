import { api, get, all } from '../api.js';
import { terminalSection } from './terminal.js';
import { h, flash, confirm, stateBadge, busyStates, poll, pageAlive, unhealthy, conditionBadges, conditionWarning } from '../ui.js';

const actionsFor = {
  running: ['stop', 'reboot', 'delete'],
  stopped: ['start', 'delete'],
  failed: ['delete'],
  pending: ['delete'],
  provisioning: ['delete'],
};

// act runs an instance action after confirmation and reports the outcome.
export async function act(inst, action, after) {
  const verbs = { start: 'Start', stop: 'Stop', reboot: 'Reboot', delete: 'Delete' };
  const ok = await confirm(`${verbs[action]} ${inst.name}?`,
    action === 'delete' ? 'The VM and its disk are destroyed. This cannot be undone.' : `The VM will ${action}.`, verbs[action]);
  if (!ok) return;
  try {
    if (action === 'delete') await api('DELETE', `/v1/instances/${inst.id}`);
    else await api('POST', `/v1/instances/${inst.id}/${action}`);
    flash(`${verbs[action]} requested for ${inst.name}.`);
  } catch (e) {
    flash(`${verbs[action]} failed: ${e.message}`, true);
  }
  if (after) await after();
}

function actionButtons(inst, after) {
  return h('div', { class: 'row' }, (actionsFor[inst.state] || []).map((a) =>
    h('button', { class: a === 'delete' ? 'danger' : '', 'data-action': a, onclick: () => act(inst, a, after),
      'aria-label': `${a} ${inst.name}` }, a)));
}

export async function instanceList(main, session) {
  const canCreate = ['tenant-admin', 'tenant-member'].includes(session.me.role);
  const body = h('tbody');
  const status = h('span', { class: 'muted', 'aria-live': 'polite' });
  main.append(
    h('div', { class: 'spread' }, h('h1', {}, 'Instances'),
      canCreate ? h('a', { class: 'button primary', href: '#/instances/new' }, 'Create GPU VM') : null),
    h('table', { 'data-testid': 'instances' },
      h('thead', {}, h('tr', {}, ['Name', 'State', 'GPU', 'Tier', 'vCPUs', 'Created', 'Actions'].map((c) => h('th', {}, c)))),
      body),
    h('p', {}, status, ' The list refreshes itself every 2 seconds.'));
  const alive = pageAlive();
  const refresh = async () => {
    const list = (await all('/v1/instances')).filter((i) => i.state !== 'deleted');
    if (!alive()) return;
    body.replaceChildren(...list.map((i) => h('tr', { 'data-name': i.name, 'data-id': i.id },
      h('td', {}, h('a', { href: `#/instances/${i.id}` }, i.name)),
      h('td', {}, stateBadge(i.state), ' ', ...conditionBadges(i)),
      h('td', {}, i.gpu_count ? `${i.gpu_count} × ${i.gpu_model}` : '—'),
      h('td', {}, i.tier || '—'),
      h('td', { class: 'num' }, i.vcpus),
      h('td', {}, new Date(i.created_at).toLocaleString()),
      h('td', {}, actionButtons(i, refresh)))));
    if (!list.length) body.append(h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'No instances yet.')));
    const busy = list.filter((i) => busyStates.includes(i.state)).length;
    const silent = list.filter((i) => unhealthy(i).length).length;
    status.textContent = `${list.length} instance(s)${busy ? `, ${busy} changing state` : ''}` +
      `${silent ? `, ${silent} on an unreachable host or GPU server` : ''}.`;
  };
  await poll(refresh, 2000);
}

export async function instanceDetails(main, session, id) {
  let inst;
  try {
    inst = await get(`/v1/instances/${id}`);
  } catch (e) {
    if (e.status === 404) {
      main.append(h('h1', {}, 'Instance not found'),
        h('p', { 'data-testid': 'not-found' }, 'There is no instance with this id in your account.'),
        h('a', { href: '#/instances' }, 'Back to instances'));
      return;
    }
    throw e;
  }
  const head = h('div');
  const info = h('dl', { class: 'kv' });
  const log = h('pre', { class: 'log', 'aria-label': 'State log' });
  const consoleLog = h('pre', { class: 'log console', 'aria-label': 'Serial console', 'data-testid': 'console-log' });
  const type = await get(`/v1/instance-types/${inst.instance_type_id}`).catch(() => null);
  main.append(h('p', {}, h('a', { href: '#/instances' }, '← Instances')), head,
    h('h2', {}, 'Connection details'), h('div', { class: 'card' }, info),
    h('h2', {}, 'State log'),
    h('p', { class: 'muted' }, 'Every state change of this VM, as the platform recorded it.'),
    log,
    h('h2', {}, 'Serial console'),
    h('p', { class: 'muted' }, 'The last output of the guest\'s serial console, as its host last sent it (refreshed every few seconds; each read is audited).'),
    consoleLog);
  main.append(terminalSection(id));
  const alive = pageAlive();
  const refresh = async () => {
    let cur;
    try {
      cur = await get(`/v1/instances/${id}`);
    } catch (e) {
      if (e.status === 404 && alive()) { head.replaceChildren(h('h1', {}, `${inst.name}: deleted`)); return; }
      throw e;
    }
    const evs = (await get(`/v1/instances/${id}/events`)).items || [];
    const con = await get(`/v1/instances/${id}/console`).catch(() => null);
    if (!alive()) return;
    head.replaceChildren(...[h('div', { class: 'spread' }, h('h1', {}, cur.name, ' ', stateBadge(cur.state)), actionButtons(cur, refresh)),
      busyStates.includes(cur.state)
        ? h('p', { class: 'progress', role: 'status' }, h('span', { class: 'spinner' }), `Working: ${cur.state} → ${cur.desired_state}`) : null,
      cur.failure_reason ? h('p', { class: 'error' }, cur.failure_reason) : null,
      conditionWarning(cur)].filter(Boolean));
    const rows = [
      ['Instance id', cur.id], ['State', `${cur.state} (desired: ${cur.desired_state})`],
      ['Instance type', type ? `${type.name}: ${type.vcpus} vCPU, ${type.memory_mib} MiB, ${type.disk_gib} GiB` : cur.instance_type_id],
      ['GPU', cur.gpu_count ? `${cur.gpu_count} × ${cur.gpu_model} (${cur.tier})` : 'none'],
      ['Image', cur.image], ['Host', cur.host_id], ['GPU server', cur.gpu_server_id || '—'],
      ['InfiniBand VF', cur.vf_pci_address || '—'],
      ['SSH', cur.ssh ? h('code', { 'data-testid': 'ssh-command' }, cur.ssh.command) : 'not reachable yet (the host forwards a port once the VM is defined)'],
      ['Forwarded ports', (cur.ports || []).map((p) => `${p.guest_port} ← ${cur.ssh ? cur.ssh.host : ''}:${p.host_port}`).join(', ') || '—'],
    ];
    info.replaceChildren(...rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
    consoleLog.textContent = con && con.log ? con.log : 'No console output yet.';
    log.textContent = evs.map((e) => `${new Date(e.at).toISOString()}  ${e.from || '(new)'} → ${e.to}  by ${e.actor}${e.reason ? '  ' + e.reason : ''}`).join('\n') || 'No events yet.';
  };
  await poll(refresh, 2000);
}
