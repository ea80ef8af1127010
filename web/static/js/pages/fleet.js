import { api, all } from '../api.js';
import { h, flash, confirm, usageBar, bytes, poll, pageAlive } from '../ui.js';

function flags(d) {
  return [d.status, d.cordoned ? 'cordoned' : null, d.draining ? 'draining' : null].filter(Boolean)
    .map((f) => h('span', { class: 'badge' + (f === 'ready' ? ' running' : f === 'unreachable' ? ' failed' : ' busy') }, f));
}

function flagButtons(base, d, after) {
  const actions = d.cordoned ? ['uncordon', 'drain'] : ['cordon', 'drain'];
  return h('div', { class: 'row' }, actions.filter((a) => !(a === 'drain' && d.draining)).map((a) =>
    h('button', { class: a === 'drain' ? 'danger' : '', 'aria-label': `${a} ${d.name}`, onclick: async () => {
      const text = { cordon: 'No new instances will be placed here.', uncordon: 'New instances may be placed here again.',
        drain: 'No new instances, and running ones are moved off as they stop.' }[a];
      if (!await confirm(`${a[0].toUpperCase() + a.slice(1)} ${d.name}?`, text, a)) return;
      try { await api('POST', `${base}/${d.id}/${a}`); flash(`${d.name}: ${a} done.`); } catch (e) { flash(e.message, true); }
      await after();
    } }, a)));
}

// moveButton drains a host or GPU server and moves its instances elsewhere (a drain that moves
// work): a GPU server's sessions migrate running; a host's VMs restart on another host with their
// disks. The moves show below the tables.
function moveButton(base, d, what, after) {
  return h('button', { class: 'danger', 'aria-label': `move work off ${d.name}`, onclick: async () => {
    if (!await confirm(`Move work off ${d.name}?`, `No new instances, and ${what}`, 'Move work')) return;
    try {
      const r = await api('POST', `${base}/${d.id}/drain`, { move: true });
      flash(`${d.name}: ${r.moves.length} move(s) planned.`);
    } catch (e) { flash(e.message, true); }
    await after();
  } }, 'move work');
}

const moveText = {
  gpu: 'each instance\'s GPU sessions move, running, to another GPU server with room.',
  host: 'each VM stops here, its disks are copied to another host with room, and it starts there with the same id and volumes.',
};

// moveRows are a draining machine's moves: each instance's state, target, progress and reason.
function moveRows(src, d, names) {
  return d.moves.map((m) => h('tr', { 'data-instance': m.instance_id },
    h('td', {}, src.name),
    h('td', {}, m.instance_name ? [m.instance_name, ' '] : '', h('code', {}, m.instance_id)),
    h('td', {}, h('span', { class: 'badge' + (m.state === 'done' ? ' running' : m.state === 'failed' || m.state === 'unplaced' ? ' failed' : ' busy') }, m.state)),
    h('td', {}, m.target_id ? (names[m.target_id] || m.target_id) : '—'),
    h('td', {}, m.bytes_total ? usageBar(m.bytes_copied, m.bytes_total, `${bytes(m.bytes_copied)} of ${bytes(m.bytes_total)}`)
      : m.sessions_moved !== undefined ? `${m.sessions_moved} session(s)` : '—'),
    h('td', { class: 'muted' }, [m.reason, m.note].filter(Boolean).join('; '))));
}

// movesTable is a (hidden until filled) table of drains' moves.
function movesTable(title, testid, body) {
  return h('div', { hidden: true }, h('h2', {}, title),
    h('table', { 'data-testid': testid }, h('thead', {}, h('tr', {}, ['From', 'Instance', 'State', 'To', 'Progress', 'Reason'].map((c) => h('th', {}, c)))), body));
}

// showMoves fills a moves table with the drains of the draining machines among list.
async function showMoves(base, list, names, body, box, alive) {
  const drains = await Promise.all(list.filter((x) => x.draining).map(async (x) => [x, await api('GET', `${base}/${x.id}/drain`)]));
  if (!alive()) return;
  const rows = drains.flatMap(([x, d]) => moveRows(x, d, names));
  body.replaceChildren(...rows);
  box.hidden = rows.length === 0;
}

// fleet shows hosts and GPU servers with their capacity in use, refreshed every 5 seconds.
export async function fleet(main) {
  const hosts = h('tbody');
  const gpus = h('tbody');
  const moves = h('tbody');
  const movesBox = movesTable('Moves', 'gpu-server-moves', moves);
  const hostMoves = h('tbody');
  const hostMovesBox = movesTable('VM moves', 'host-moves', hostMoves);
  main.append(h('h1', {}, 'Fleet'), h('h2', {}, 'Hosts'),
    h('table', { 'data-testid': 'hosts' }, h('thead', {}, h('tr', {}, ['Host', 'Status', 'vCPUs', 'Memory', 'Disk', 'Last heartbeat', ''].map((c) => h('th', {}, c)))), hosts),
    hostMovesBox,
    h('h2', {}, 'GPU servers'),
    h('table', { 'data-testid': 'gpu-servers' }, h('thead', {}, h('tr', {}, ['GPU server', 'Status', 'GPUs', 'GPU memory reserved', 'Sessions', ''].map((c) => h('th', {}, c)))), gpus),
    movesBox);
  const alive = pageAlive();
  const refresh = async () => {
    const [hs, gs] = await Promise.all([all('/v1/hosts'), all('/v1/gpu-servers')]);
    if (!alive()) return;
    hosts.replaceChildren(...hs.map((x) => h('tr', { 'data-name': x.name },
      h('td', {}, h('strong', {}, x.name), h('br'), h('small', { class: 'muted' }, x.hostname || 'never heard from')),
      h('td', {}, flags(x)),
      h('td', {}, usageBar(x.used_vcpus, x.vcpus, `${x.used_vcpus}/${x.vcpus} vCPUs`)),
      h('td', {}, usageBar(x.used_memory_mib, x.memory_mib, `${x.used_memory_mib}/${x.memory_mib} MiB`)),
      h('td', {}, usageBar(x.used_disk_gib, x.disk_gib, `${x.used_disk_gib}/${x.disk_gib} GiB`)),
      h('td', {}, x.last_heartbeat_at ? new Date(x.last_heartbeat_at).toLocaleTimeString() : '—'),
      h('td', {}, flagButtons('/v1/hosts', x, refresh), moveButton('/v1/hosts', x, moveText.host, refresh)))));
    if (!hs.length) hosts.append(h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'No hosts registered.')));
    gpus.replaceChildren(...gs.map((g) => {
      const total = (g.gpus || []).reduce((s, x) => s + x.memory_bytes, 0);
      const used = (g.gpus || []).reduce((s, x) => s + x.reserved_bytes, 0);
      return h('tr', { 'data-name': g.name },
        h('td', {}, h('strong', {}, g.name), h('br'), h('small', { class: 'muted' }, g.endpoint || '—')),
        h('td', {}, flags(g)),
        h('td', {}, (g.gpus || []).map((x) => h('div', {}, `#${x.index} ${x.name}${x.healthy ? '' : ' (unhealthy)'}`))),
        h('td', {}, usageBar(used, total, `${bytes(used)} of ${bytes(total)}`)),
        h('td', { class: 'num' }, g.active_sessions),
        h('td', {}, flagButtons('/v1/gpu-servers', g, refresh), moveButton('/v1/gpu-servers', g, moveText.gpu, refresh)));
    }));
    if (!gs.length) gpus.append(h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'No GPU servers registered.')));
    const names = Object.fromEntries([...hs, ...gs].map((x) => [x.id, x.name]));
    await Promise.all([showMoves('/v1/hosts', hs, names, hostMoves, hostMovesBox, alive),
      showMoves('/v1/gpu-servers', gs, names, moves, movesBox, alive)]);
  };
  await poll(refresh, 5000);
}
